"""Pictures of a model and its training. matplotlib (pyproject extra `viz`) is imported inside the functions that
draw, so importing this package needs only the core.

Reading guide, paper -> code:
    Appendix "Attention visualizations"   -> attention.py (recording the weights: aiayn.decoding.attention's
        (Figures 3-5: per layer, per head,      `recording` and `record`, one teacher-forced forward ->
        encoder self-attention as lines)        weights per kind, layer, head), `attention_data` (the attention.json
                                                dict for one sentence), `plot_heatmaps`, `plot_lines` (the
                                                appendix's view), `render_html` (one self-contained page), `write_all`
                                             -> attention_view.html: the page's viewer (CSS + `renderAttention`
                                                JS), shared with any page that fetches attention.json
    Training curves                       -> curves.py: `plot_run`

Commands: `aiayn attention` (aiayn/cli/attention.py). Word alignments (`aiayn translate --print-alignment`) are the
engines' (aiayn.decoding.alignment). Worked example on the paper's sentence, and which layer aligns best and why:
docs/attention.md.
"""

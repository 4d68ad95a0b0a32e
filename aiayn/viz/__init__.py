"""Pictures of a model and its training. matplotlib (pyproject extra `viz`) is imported inside the functions that
draw, so importing this package needs only the core.

Reading guide, paper -> code:
    Appendix "Attention visualizations"   -> attention.py: `recording` (an AttentionRecorder as the `attention`
        (Figures 3-5: per layer, per head,      of every MultiHeadAttention), `record` (one teacher-forced forward ->
        encoder self-attention as lines)        weights per kind, layer, head), `attention_data` (the attention.json
                                                dict for one sentence), `plot_heatmaps`, `plot_lines` (the
                                                appendix's view), `render_html` (one self-contained page), `write_all`
                                             -> attention_view.html: the page's viewer (CSS + `renderAttention`
                                                JS), shared with any page that fetches attention.json
    Word alignments from cross-attention  -> alignment.py: `word_ids`, `word_alignment` (subwords merged to words,
        (fairseq/Marian `--print-alignment`)    one link per target word), `align` (batches), `format_alignment`
                                                ("i-j" pairs), `translate_with_alignment` (translate --print-alignment)
    Training curves                       -> curves.py: `plot_run`

Commands: `aiayn attention` (aiayn/cli/attention.py), `aiayn translate --print-alignment`. Worked example on the
paper's sentence, and which layer aligns best and why: docs/attention.md.
"""

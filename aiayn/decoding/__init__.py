"""Decoding: a trained model's text in, text out, through aiayn's engine or CTranslate2's.

Reading guide (engine.py first, then the rest from the bottom up):
    engine.py         Engine (what every engine offers) and open_engine(path, options): the one place a path becomes
                      an engine and a feature it lacks becomes one error
    lines.py          the text side shared by every engine: input lines -> sentences, source ids and target prefixes;
                      translations back to output lines (Translation, the --print-scores columns); no torch
    batches.py        what both engines share below the text: Limits (the word cap, once), length-sorted batches
    sentences.py      split_sentences: a line cut into its sentences
    alignment.py      word alignments from attention: subword attention -> word links (the recipe, once; no torch)
    attention.py      aiayn's attention weights recorded (one teacher-forced forward) and aligned
    cache.py          the decoder's incremental state (keys/values per layer, beam reorders)
    step.py           one step over a primed cache, the decoder layers' operators written out (no module calls)
    sampling.py       sampling's draws (temperature, top-k, top-p)
    ensemble.py       several models of one vocabulary as one model for the searches
    search.py         greedy, beam and sampling search on the KV cache; the Constraint hook
    static_search.py  the same searches with fixed-shape steps (CUDA graphs)
    glossary.py       glossaries: term matching, lexically constrained beam search
    inference.py      decoding's precisions (fp32, bf16, int8; prepacked for oneDNN) and `load`
    shortlist.py      the lexical shortlist
    translator.py     aiayn's engine: Translator, decoding model + vocabulary + SearchConfig
    ct2.py            CTranslate2's engine: an exported folder, no torch

Nothing is imported here: `aiayn translate --engine ct2` imports ct2.py alone (no torch).
"""

"""Decoding: a trained model's text in, text out, through aiayn's engine or CTranslate2's.

Reading guide (lowest first):
    lines.py          the text side shared by every engine: input lines -> sentences, source ids and target prefixes;
                      translations back to output lines (Translation, the --print-scores columns); no torch
    sentences.py      split_sentences: a line cut into its sentences
    alignment.py      word alignments from cross-attention: subword attention -> word links (the recipe, once)
    cache.py          the decoder's incremental state (keys/values per layer, beam reorders)
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

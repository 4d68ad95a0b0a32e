"""English constituency parsing (section 6.3 of the paper) with the same Transformer.

    trees.py    PTB trees: read, normalize as EVALB's COLLINS.prm, linearize (Vinyals et al. 2015) and back
    the scorer  aiayn.metrics.evalb (labelled bracket P/R/F1 exactly as EVALB)

Source = the words of a sentence; target = the structure tokens of its tree: "(S (NP XX )NP (VP XX )VP XX )S".
"""

"""Documents and markup translated as whole sentences: blocks of text with inline spans (spans.py), sentences by the
source language's rules (sentences.py), spans placed on the translation through word alignments (nesting.py), and
HTML as blocks (html.py)."""

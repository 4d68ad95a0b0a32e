"""Documents and markup translated as whole sentences: blocks of text with inline spans (spans.py: Span, Block,
translate_blocks, carry, protected_spans, walk), sentences by the source language's rules (sentences.py), spans
placed on a translation through its word alignment with nesting repaired (nesting.py), HTML as blocks (html.py), and
aiayn's engines as the translator (engines.py). See docs/markup.md."""

"""End to end: data preparation, training recipes, serving, exports, profiles of whole steps."""

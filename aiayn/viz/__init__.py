"""Pictures of a model and its training: training curves (`curves`), attention maps and alignments."""

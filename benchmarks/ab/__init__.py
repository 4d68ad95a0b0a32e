"""A/B micro-benchmarks: one lever each, its variants interleaved."""

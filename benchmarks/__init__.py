"""aiayn's benchmarks: a small package around one timing helper (timing.py), run from the repository root as
`python -m benchmarks.<group>.<script> ...` with aiayn installed (`pip install -e .`). Layout and commands: README.md.
None of these is a test."""

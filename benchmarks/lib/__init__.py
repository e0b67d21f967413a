"""Helpers the benchmark scripts share (benchmarks/README.md, "Helper modules")."""

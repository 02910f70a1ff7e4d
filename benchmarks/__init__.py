"""fedclust's experiments: benchmarks/experiments/NAME.yaml, run and reported by `python -m benchmarks`
(benchmarks/README.md)."""

"""tidemark benchmarks: `python -m bench.produce_fetch` (`make bench`); results in BENCHMARKS.md."""

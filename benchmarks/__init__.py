"""Benchmarks: outside the default test run; each emits JSON with ratios against a
baseline measured in the same run."""

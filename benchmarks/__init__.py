"""leakscope's benchmarks: run ``python benchmarks/run.py [--short]`` (see docs/performance.md)."""

"""Benchmarks of agentlab against what a user would pick instead; `python -m bench.run` (see README.md)."""

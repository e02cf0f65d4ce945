"""Benchmarks of the durable worker, each measured beside its floor in the same run."""

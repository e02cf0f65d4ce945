"""The worker: the pure planner, the loop that runs it, and the adapters to the outside systems."""

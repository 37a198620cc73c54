"""Reads: partition pruning, scans of leaves, time travel and history."""

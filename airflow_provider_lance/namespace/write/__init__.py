"""Writes below a commit: routing rows to partitions, staging files, leaf commits."""

"""Upkeep: retention, the orphan sweep and repair of a damaged `__manifest`."""

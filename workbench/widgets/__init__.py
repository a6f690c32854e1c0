"""Notebook widgets: the live run view (and, later, the placement board)."""

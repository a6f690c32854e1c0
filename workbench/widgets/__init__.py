"""Notebook widgets: the live run view and the placement board."""

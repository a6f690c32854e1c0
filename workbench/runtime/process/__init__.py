"""Processes and threads that behave: teardown a second Ctrl-C does not cut short, a process
that exits although a run left a thread behind, cells that end their own process, glibc's
malloc thresholds, and telling a computing thread from a stalled one.

Imports the standard library and ``workbench.errors`` only: every other part of the runtime
may use it.
"""

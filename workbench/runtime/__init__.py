"""The engine: what runs a placed FDG and what a run leaves behind.

Six sub-packages, each a concern, from the bottom (``workbench/layers.py`` holds the order and
``tests/test_layers.py`` enforces it; each may import only those below it):

- ``process`` — processes and threads: interrupts, exit guards, cells that end their
  process, malloc settings, whether a thread computes or stalls;
- ``values`` — values along interfaces: stacking, gathering, splitting, the all-reduce;
- ``transport`` — how values cross between replicas: mailboxes, channels, the wire,
  torch.distributed process groups, what can be pickled;
- ``state`` — a run's state: the run record, snapshots, checkpoints, random streams, env steps;
- ``replicas`` — one replica of a group: its namespaces, program, loop, lanes, fence;
- ``engine`` — the driver and its pure bookkeeping, the Backend contract and the inline backend.

This file imports nothing: ``import workbench.runtime.engine.driver`` loads only what the
driver needs.
"""

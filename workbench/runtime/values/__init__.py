"""Values along an FDG's interfaces: stacking replicas' values and gathering them, splitting a
batch among replicas, lists marked for the gather, and the all-reduce's arithmetic (written
over a ``send``/``take`` pair, so any transport can carry it).

May import ``workbench.runtime.process`` and the layers below the runtime; nothing that moves
bytes.
"""

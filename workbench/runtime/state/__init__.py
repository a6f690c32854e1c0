"""A run's state and record: the Run record and its iteration records, snapshots between
iterations and how often they are taken, checkpoint files and their writer, fragment state as
portable tensors, what a resume checks, each replica's random streams, env steps counted.

May import ``transport``, ``values`` and ``process``; never the replicas or the driver.
"""

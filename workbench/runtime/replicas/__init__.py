"""One replica of a group of fused fragments: its namespaces and program, the loop that walks
its task stream, lanes of one thread, acting on arrival, per-step sends, the fence where all
replicas stop together, and the errors its cells get.

May import ``state``, ``transport``, ``values`` and ``process``; never the driver.
"""

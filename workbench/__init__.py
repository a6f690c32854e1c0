"""workbench: notebook cells become a fragmented dataflow graph that trains RL on Dask."""

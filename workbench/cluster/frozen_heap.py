"""Imported last by the embedded workers' forkserver: its imports' objects, frozen.

:data:`workbench.cluster.forkserver.WORKER_PRELOAD` ends with this module, so the server
calls :func:`gc.freeze` once torch, distributed and workbench are imported: every object
they made moves to the collector's permanent generation, which no collection walks. The
server then exits without a final pass over them (~1 s of CPU on a 2-core machine, spent
after the command that started it had returned), and the workers it forks inherit the
frozen generation: their full collections skip those objects too, and leave the pages
they share with the server unwritten, as Python's documentation of ``gc.freeze`` advises
for a server that forks. What a worker creates itself is collected as usual.
"""

import gc

gc.freeze()

"""How values cross between replicas: a mailbox per replica, postmen that fill them in one
process or over sockets (length-prefixed frames, plain or TLS, big byte strings as frames of
their own), the all-reduce over torch.distributed, and the one message for what cannot be
pickled.

May import ``workbench.runtime.values`` and ``process``; knows nothing of runs or replicas.
"""

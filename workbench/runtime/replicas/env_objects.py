"""Which objects in a fragment's namespace are environments, and closing them: what the
driver does at a run's end, and a replica when the envs an init cell just built are replaced
by the ones its fragment keeps.

    >>> class Env:
    ...     closed = False
    ...     def reset(self): ...
    ...     def step(self, action): ...
    ...     def close(self): self.closed = True
    >>> ns = {"envs": Env(), "n": 3}
    >>> close_envs(ns); ns["envs"].closed
    True
"""

from __future__ import annotations

__all__ = ["is_env", "close_envs"]


def is_env(value) -> bool:
    """Whether ``value`` is an environment :func:`close_envs` closes (reset, step and close)."""
    return callable(getattr(value, "close", None)) and hasattr(value, "step") and hasattr(value, "reset")


def close_envs(ns: dict) -> None:
    """Close the environments a namespace holds (:func:`is_env`)."""
    for value in list(ns.values()):
        if is_env(value):
            try:
                value.close()
            except Exception:  # closing is best effort; the run already has its result
                pass

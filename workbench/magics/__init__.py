"""IPython magics: ``%%fragment`` and ``%fdg``, a thin layer over :class:`workbench.FDG`.

This is the only package that imports IPython.
"""
from workbench.magics.fragment import WorkbenchMagics

__all__ = ["WorkbenchMagics", "load_ipython_extension"]


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``."""
    ipython.register_magics(WorkbenchMagics(ipython))

"""IPython magics: ``%%fragment`` and ``%fdg``, a thin layer over :class:`workbench.FDG`.

This is the only package that imports IPython.
"""

from workbench.magics.fragment import WorkbenchMagics

__all__ = ["WorkbenchMagics", "load_ipython_extension"]


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``."""
    ipython.register_magics(WorkbenchMagics(ipython))
    if hasattr(ipython, "kernel"):  # a Jupyter kernel: wb.sweep's table as a widget in the cell
        from workbench.magics.sweep_view import NotebookView
        from workbench.sweep import views

        views.notebook_view = NotebookView
    _load_bokehjs(ipython)
    _wrap_notices(ipython)


def _wrap_notices(ipython) -> None:
    """Printed notices wrap at word boundaries in this page (workbench.widgets.notices)."""
    if type(ipython).__name__ != "ZMQInteractiveShell":  # a terminal or a test shell: no page
        return
    from IPython.display import HTML, display

    from workbench.widgets.notices import stdout_style_html

    display(HTML(stdout_style_html()))


def _load_bokehjs(ipython) -> None:
    """Put BokehJS in the notebook page now, from the installed package (no CDN): the live
    view of ``%fdg run`` renders with it, and it must be loaded before any view is built."""
    if type(ipython).__name__ != "ZMQInteractiveShell":  # a terminal or a test shell: no page
        return
    try:
        from bokeh.io import output_notebook
        from bokeh.resources import INLINE
    except ImportError:  # bokeh missing: runs fall back to a text progress bar
        return
    output_notebook(INLINE, hide_banner=True)

"""Projection mode: every figure and widget readable on a 1280x720 projector from the back of a room:
``mh.setup(projection=True)`` (or ``MGPU_PROJECTION=1``), or ``mh.projection_mode()`` from any cell. It changes the
drawing style and, in a notebook, the size of every ipywidgets control (``data/projection.css``)."""

import os

from mgpu_helpers.widgets import style


def requested_by_environment() -> bool:
    """True when ``MGPU_PROJECTION`` is set to 1/true/yes/on (e.g. for every kernel of a classroom server)."""
    return os.environ.get("MGPU_PROJECTION", "").strip().lower() in ("1", "true", "yes", "on")


def _in_kernel() -> bool:
    from IPython import get_ipython  # installed with ipywidgets

    return hasattr(get_ipython(), "kernel")  # None outside IPython


def projection_mode(on: bool = True) -> style.Style:
    """Switch projection mode on or off for every figure drawn from now on; in a notebook, switching on also
    enlarges the widget controls while that output is on the page. Returns the style now in force."""
    st = style.set_projection(on)
    if on and _in_kernel():
        from IPython.display import HTML, display

        display(HTML(style.projection_css()))
    return st

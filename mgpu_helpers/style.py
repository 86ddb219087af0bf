"""One look for every figure and widget of the course.

Colours are the Okabe-Ito palette (readable with every common colour-vision deficiency). Drawing functions
take their sizes from :func:`current` so that projection mode (large fonts, thick lines, for a classroom)
changes every figure at once.
"""
from __future__ import annotations

from dataclasses import dataclass

# Okabe & Ito (2008), colour-blind-safe.
PALETTE = {
    "blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00",
    "sky": "#56B4E9", "purple": "#CC79A7", "yellow": "#F0E442", "black": "#000000", "grey": "#999999",
}
# What each kind of time or memory is drawn in, everywhere in the course.
KIND_COLOURS = {
    "compute": PALETTE["blue"], "communicate": PALETTE["orange"], "wait": PALETTE["vermillion"],
    "other": PALETTE["grey"], "params": PALETTE["blue"], "grads": PALETTE["orange"],
    "optimizer": PALETTE["green"], "activations": PALETTE["purple"], "idle": PALETTE["grey"],
}


@dataclass(frozen=True)
class Style:
    font_size: float = 10.0
    line_width: float = 1.5
    fig_scale: float = 1.0
    projection: bool = False


_NORMAL = Style()
_PROJECTION = Style(font_size=18.0, line_width=3.5, fig_scale=1.35, projection=True)
_current = _NORMAL


def current() -> Style:
    return _current


def set_projection(on: bool = True) -> Style:
    """Switch projection mode (large fonts, thick lines) for every figure drawn from now on."""
    global _current
    _current = _PROJECTION if on else _NORMAL
    try:
        import matplotlib as mpl
        mpl.rcParams.update({"font.size": _current.font_size, "lines.linewidth": _current.line_width,
                             "axes.linewidth": _current.line_width / 1.5,
                             "axes.prop_cycle": mpl.cycler(color=[PALETTE[k] for k in
                                                                  ("blue", "orange", "green", "vermillion",
                                                                   "sky", "purple", "black")])})
    except ImportError:
        pass
    return _current


def figsize(width: float, height: float) -> tuple[float, float]:
    s = _current.fig_scale
    return (width * s, height * s)

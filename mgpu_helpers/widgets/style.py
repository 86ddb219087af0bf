"""One look for every figure and widget of the course: the Okabe-Ito palette (readable with every common
colour-vision deficiency), and sizes read from :func:`current`, so that projection mode changes every figure."""

import re
from dataclasses import dataclass

from mgpu_helpers.report import recorded

# Okabe & Ito (2008), colour-blind-safe.
PALETTE = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00", "sky": "#56B4E9"}
PALETTE |= {"purple": "#CC79A7", "yellow": "#F0E442", "black": "#000000", "grey": "#999999"}
# Each kind of time or memory, everywhere in the course (by the palette's names).
_KINDS = dict(compute="blue", communicate="orange", wait="vermillion", other="grey", params="blue", grads="orange")
KIND_COLOURS = {k: PALETTE[c] for k, c in (_KINDS | dict(optimizer="green", activations="purple", idle="grey")).items()}
# Fonts with Chinese glyphs, the first installed one wins: Linux's, then Windows' and macOS', then a last resort.
_LINUX_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei")
CJK_FONTS = (*_LINUX_FONTS, "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "AR PL UMing CN")


def cjk_font() -> str | None:
    """The name of an installed font that has Chinese glyphs (None when matplotlib knows none)."""
    from matplotlib import font_manager

    names = {f.name for f in font_manager.fontManager.ttflist}
    return next((n for n in CJK_FONTS if n in names), None)


def zh_or_en(zh: str, en: str) -> str:
    """A figure label: Chinese where a Chinese font is installed (else empty boxes), else English."""
    return zh if cjk_font() else en


def cjk_fonts():
    """A context that puts the Chinese font first (a no-op without one): draw inside it."""
    import matplotlib as mpl

    font = cjk_font()
    return mpl.rc_context({"font.family": [font, "DejaVu Sans"]} if font else {})


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


# Okabe-Ito without yellow, which is too pale on a white screen in a bright room.
_CYCLE = ("blue", "orange", "green", "vermillion", "sky", "purple", "black")


def set_projection(on: bool = True) -> Style:
    """Switch projection mode (large fonts, thick lines, high-contrast colours) on or off for every figure drawn
    from now on, plain matplotlib plots too (through rcParams). Returns the style now in force."""
    import matplotlib as mpl

    global _current
    _current = st = _PROJECTION if on else _NORMAL
    scale = st.line_width / _NORMAL.line_width  # text, lines, markers and axes scale with the style
    rc = {
        "font.size": st.font_size,
        "lines.linewidth": st.line_width,
        "lines.markersize": 6.0 * scale**0.5,
        "axes.linewidth": st.line_width / 1.5,
        "patch.linewidth": max(1.0, st.line_width / 1.5),
        "grid.linewidth": 0.8 * scale**0.5,
        **{f"{axis}tick.major.width": 0.8 * scale**0.5 for axis in "xy"},
        **{f"{axis}tick.major.size": 3.5 * scale**0.5 for axis in "xy"},
        "axes.prop_cycle": mpl.cycler(color=[PALETTE[k] for k in _CYCLE]),
        "axes.titleweight": "bold" if st.projection else "normal",
    }
    # Ink stays black in both modes (a setting that changed it is put back).
    rc.update(dict.fromkeys(("axes.edgecolor", "text.color", "axes.labelcolor", "xtick.color", "ytick.color"), "black"))
    mpl.rcParams.update(rc)
    return _current


def projection_css() -> str:
    """A ``<style>`` element with ``data/projection.css`` (ipywidgets 8 sizes its controls through CSS variables:
    larger values make them readable from the back of a room)."""
    return f'<style id="mgpu-projection">{recorded.text("projection.css")}</style>'


def figsize(width: float, height: float) -> tuple[float, float]:
    s = _current.fig_scale
    return (width * s, height * s)


def show(fig) -> None:
    """Display ``fig`` and close it (closing keeps a widget's redraws from piling up figures)."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    display(fig)
    plt.close(fig)


def redraw_on(controls, redraw, now: bool = True) -> None:
    """Call ``redraw`` whenever one of the ipywidgets ``controls`` changes value, and once ``now``."""
    for c in controls:
        c.observe(redraw, names="value")
    if now:
        redraw()


def show_in(out, draw, *args, text: str = "") -> None:
    """Replace what the Output ``out`` shows by the figure ``draw(*args)`` and ``text`` under it."""
    with out:
        out.clear_output(wait=True)
        show(draw(*args))
        if text:
            print(text)


def parse_numbers(text: str, error: str) -> tuple[float, ...]:
    """The numbers of a widget's text box, between commas (either width) or slashes; a part that is not a number
    raises ValueError(``error``), the widget's own sentence saying what to write."""
    try:
        return tuple(float(p) for p in re.split(r"[,，/]", text) if p.strip())
    except ValueError:
        raise ValueError(error) from None


def patch_legend(owner, patches: dict, **kwargs):
    """A frameless legend of coloured patches on a figure or axes: ``patches`` maps each label to its colour, or
    to the keywords of its ``matplotlib.patches.Patch`` (hatch, edge colour ...)."""
    from matplotlib.patches import Patch

    handles = [Patch(label=label, **(p if isinstance(p, dict) else {"color": p})) for label, p in patches.items()]
    return owner.legend(handles=handles, frameon=False, **kwargs)

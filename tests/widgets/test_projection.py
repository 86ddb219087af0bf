"""Projection mode: one switch makes every figure and widget of the course readable on a projector."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from mgpu_helpers.widgets import style

ROOT = __file__.rsplit("/tests/", 1)[0]


@pytest.fixture
def normal_style():
    style.set_projection(False)
    yield
    style.set_projection(False)


def _figures():
    """One figure from every widget module's drawing function, drawn in the style now in force."""
    from mgpu_helpers.launcher.trace import Span
    from mgpu_helpers.models import collectives as mh_collectives
    from mgpu_helpers.models import memory
    from mgpu_helpers.widgets import (
        allreduce,
        bandwidth,
        knowledge_map,
        rank_distribution,
        sharding,
        straggler,
        thread_index,
        topology,
    )

    spans = [
        [
            Span("compute", "c", 0.0, 0.01 * (r + 1)),
            Span("wait", "w", 0.01 * (r + 1), 0.04),
            Span("communicate", "ar", 0.04, 0.05),
        ]
        for r in range(4)
    ]
    inputs = mh_collectives.make_inputs("rank", 4)
    return {
        "allreduce": allreduce.draw_collective(
            "all_reduce", inputs, mh_collectives.expected_outputs("all_reduce", inputs)
        ),
        "bandwidth": bandwidth.draw_busbw(
            [{"op": "all_reduce", "nbytes": 2**k, "busbw": float(k)} for k in range(10, 20, 3)]
        ),
        "step_breakdown": bandwidth.draw_step_breakdown(
            [
                {"nbytes": 2**k, "compute_us": 50.0, "wait_us": 5.0, "comm_us": 10.0 * k, "efficiency": 0.5}
                for k in (10, 20)
            ]
        ),
        "knowledge_map": knowledge_map.draw_knowledge_map(),
        "rank_distribution": rank_distribution.draw_rank_distribution({"compute": [[0.01, 0.012], [0.02, 0.021]]}),
        "sharding": sharding.draw_memory_plan(memory.memory_plan("replicate", world_size=4, capacity=16, params=24)),
        "straggler": straggler.draw_timeline(spans),
        "thread_index": thread_index.draw_thread_map(thread_index.thread_map(3, 64, 150)),
        "topology": topology.draw_link_matrix([["X", "NV18"], ["NV18", "X"]]),
    }


def _measure(fig):
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()]
    widths = [ln.get_linewidth() for ln in fig.findobj(Line2D) if ln.get_visible()]
    w, h = fig.get_size_inches()
    return statistics.median(sizes), max(widths, default=0.0), w, h


def _on_screen(font_pt: float, width_in: float) -> float:
    """Font size as seen in a 1280 px wide JupyterLab: a figure wider than the ~1150 px output area
    (100 dpi) is scaled down to fit."""
    return font_pt * min(1.0, 11.5 / width_in)


def test_every_widget_figure_gets_larger_text_and_figures_in_projection_mode(normal_style):
    import matplotlib.pyplot as plt

    normal = {k: _measure(f) for k, f in _figures().items()}
    plt.close("all")
    style.set_projection(True)
    projected = {k: _measure(f) for k, f in _figures().items()}
    plt.close("all")
    for name in normal:
        (f0, _l0, w0, h0), (f1, _l1, w1, h1) = normal[name], projected[name]
        assert f1 >= 1.5 * f0, f"{name}: median font {f0} -> {f1} in projection mode"
        assert w1 * h1 > w0 * h0, f"{name}: the figure did not grow in projection mode"
        # What matters on the wall: text still larger after the browser fits the figure to a 1280 px screen.
        assert _on_screen(f1, w1) >= 1.25 * _on_screen(f0, w0), f"{name}: text not larger on a 1280 px screen"


def test_projection_lines_are_thick_and_colours_skip_pale_yellow(normal_style):
    import matplotlib as mpl

    style.set_projection(True)
    assert mpl.rcParams["lines.linewidth"] >= 3 and mpl.rcParams["font.size"] >= 16
    colours = [c["color"].upper() for c in mpl.rcParams["axes.prop_cycle"]]
    assert colours[:4] == ["#0072B2", "#E69F00", "#009E73", "#D55E00"]
    assert style.PALETTE["yellow"].upper() not in colours
    style.set_projection(False)
    assert mpl.rcParams["lines.linewidth"] == 1.5 and mpl.rcParams["font.size"] == 10


def test_projection_css_enlarges_ipywidgets_controls():
    css = style.projection_css()
    assert css.startswith("<style") and "--jp-widgets-font-size: 20px" in css and ".widget-readout" in css


def _run(code: str, **env) -> str:
    import os

    e = dict(os.environ, MGPU_FORCE_CPU="1", **env)
    e.pop("MGPU_PROJECTION", None) if "MGPU_PROJECTION" not in env else None
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env=e)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_setup_projection_true_switches_the_style_and_says_so():
    out = _run(
        "import mgpu_helpers as mh\nfrom mgpu_helpers.widgets import style\n"
        "env = mh.setup(prewarm=False, projection=True)\n"
        "import matplotlib as mpl\n"
        "print('STATE', env.projection, style.current().projection, mpl.rcParams['font.size'])"
    )
    assert "display:  projection mode" in out
    assert out.split("STATE")[1].split() == ["True", "True", "18.0"]


def test_setup_honours_mgpu_projection_for_a_classroom_server():
    out = _run(
        "import mgpu_helpers as mh\nfrom mgpu_helpers.widgets import style\n"
        "env = mh.setup(show=False, prewarm=False)\nprint(env.projection, style.current().projection)",
        MGPU_PROJECTION="1",
    )
    assert out.split() == ["True", "True"]


def test_setup_without_projection_keeps_the_normal_look():
    out = _run(
        "import mgpu_helpers as mh\nfrom mgpu_helpers.widgets import style\n"
        "env = mh.setup(prewarm=False)\nprint('STATE', env.projection, style.current().projection)"
    )
    assert "projection mode" not in out and out.split("STATE")[1].split() == ["False", "False"]


def test_projection_mode_shows_the_widget_css_inside_a_kernel():
    from unittest import mock

    import mgpu_helpers as mh

    shown = []
    with (
        mock.patch("mgpu_helpers.widgets.projection._in_kernel", return_value=True),
        mock.patch("IPython.display.display", side_effect=shown.append),
    ):
        try:
            st = mh.projection_mode(on=True)
        finally:
            style.set_projection(False)
    assert st.projection and len(shown) == 1 and "--jp-widgets-font-size" in shown[0].data

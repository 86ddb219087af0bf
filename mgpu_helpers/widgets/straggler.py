"""Straggler timeline: per-rank compute / wait / communicate spans of a real traced run.

Only drawing: :func:`draw_timeline` (one run) and :func:`draw_comparison` (several runs on one time scale)
take ``RankResults.spans`` (a list per rank of :class:`mgpu_helpers.measure.trace.Span`) and return a matplotlib
Figure. :func:`show_straggler` wraps them in ipywidgets: choose the shards, run them on real ranks with
:func:`mgpu_helpers.measure.straggler.run_traced`, see the timeline. The waits and medians are computed in
:mod:`mgpu_helpers.measure.straggler`.
"""
from __future__ import annotations

# The widget launches and labels with these; the waits' medians are importable here for the widget's users.
from mgpu_helpers.measure.straggler import median_waits, median_worst_wait, run_traced, wait_by_rank  # noqa: F401
from mgpu_helpers.widgets import style

PRESETS = {"12/6/4/2 (uneven)": (12, 6, 4, 2), "6/6/6/6 (balanced)": (6, 6, 6, 6)}
DRAWN_KINDS = ("compute", "wait", "communicate")


def _origin(spans_per_rank) -> float:
    starts = [s.start for spans in spans_per_rank for s in spans]
    return min(starts) if starts else 0.0


def _draw(ax, spans_per_rank, t0: float, title: str, labels=None) -> None:
    st = style.current()
    n = len(spans_per_rank)
    for r, spans in enumerate(spans_per_rank):
        for s in spans:
            if s.kind not in DRAWN_KINDS or s.seconds <= 0:
                continue
            ax.barh(r, s.seconds * 1e3, left=(s.start - t0) * 1e3, height=0.6,
                    color=style.KIND_COLOURS[s.kind], edgecolor="white", linewidth=0.5)
    waits = wait_by_rank(spans_per_rank)
    ends = [max((s.end for s in spans), default=t0) for spans in spans_per_rank]
    x_end = (max(ends) - t0) * 1e3 if ends else 1.0
    for r in range(n):
        ax.text(x_end * 1.01, r, f"wait {waits[r] * 1e3:.1f} ms", va="center", fontsize=st.font_size * 0.8)
    names = labels or [f"rank {r}" for r in range(n)]
    ax.set_yticks(range(n), names)
    ax.invert_yaxis()
    ax.set_xlim(0, x_end * 1.22)
    ax.set_title(title, fontsize=st.font_size)
    ax.grid(axis="x", alpha=0.3)


def _legend(fig) -> None:
    from matplotlib.patches import Patch
    handles = [Patch(color=style.KIND_COLOURS[k], label=k) for k in DRAWN_KINDS]
    fig.legend(handles=handles, loc="upper right", ncol=3, frameon=False)


def draw_timeline(spans_per_rank, title: str = "per-rank timeline", labels=None):
    """One run's spans, one row per rank, in ms from the first span; the wait of each rank written at right."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=style.figsize(8, 0.6 * len(spans_per_rank) + 1.4))
    _draw(ax, spans_per_rank, _origin(spans_per_rank), title, labels)
    ax.set_xlabel("time (ms)")
    _legend(fig)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig


def draw_comparison(runs: dict):
    """Several runs (``{title: spans_per_rank}``) stacked, each from its own start, on one shared time axis."""
    import matplotlib.pyplot as plt
    n_rows = sum(len(v) for v in runs.values())
    fig, axes = plt.subplots(len(runs), 1, sharex=True, squeeze=False,
                             figsize=style.figsize(8, 0.55 * n_rows + 1.2 * len(runs)))
    for ax, (title, spans) in zip(axes[:, 0], runs.items()):
        _draw(ax, spans, _origin(spans), title)
    right = max(ax.get_xlim()[1] for ax in axes[:, 0])
    for ax in axes[:, 0]:
        ax.set_xlim(0, right)
    axes[-1, 0].set_xlabel("time (ms)")
    _legend(fig)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def parse_shards(text: str) -> tuple:
    """"12/6/4/2" -> (12.0, 6.0, 4.0, 2.0); raises ValueError for anything else (1..8 positive numbers)."""
    parts = [p for p in text.replace(",", "/").split("/") if p.strip()]
    vals = tuple(float(p) for p in parts)
    if not 1 <= len(vals) <= 8 or any(v <= 0 for v in vals):
        raise ValueError(f"give 1 to 8 positive shard sizes like 12/6/4/2, got {text!r}")
    return vals


def show_straggler(default: str = "12/6/4/2", steps: int = 2):
    """ipywidgets: a shard box ("12/6/4/2"), presets, a Run button, real matmuls or deterministic sleeps;
    each run is real and traced."""
    import ipywidgets as W
    import matplotlib.pyplot as plt
    from IPython.display import display

    box = W.Text(value=default, description="shards")
    preset = W.Dropdown(options=["(custom)"] + list(PRESETS), value="(custom)", description="preset")
    n_steps = W.IntSlider(value=steps, min=1, max=5, description="steps")
    button = W.Button(description="Run on real ranks", button_style="primary")
    cost = W.Dropdown(options=[("real matmuls", None), ("sleep 10 ms per unit (deterministic)", 0.010)],
                      value=None, description="compute")
    out = W.Output()

    def on_preset(change):
        if change["new"] in PRESETS:
            box.value = "/".join(str(v) for v in PRESETS[change["new"]])

    def on_run(_):
        with out:
            out.clear_output(wait=True)
            try:
                shards = parse_shards(box.value)
            except ValueError as exc:
                print(exc)
                return
            res = run_traced(shards, n_steps.value, seconds_per_unit=cost.value)
            fig = draw_timeline(res.spans, f"shards {box.value} on {res.backend} ranks",
                                [f"rank {r} ({shards[r]:g})" for r in range(len(shards))])
            display(fig)
            plt.close(fig)

    preset.observe(on_preset, names="value")
    button.on_click(on_run)
    return W.VBox([W.HBox([box, preset]), W.HBox([n_steps, button]), cost, out])

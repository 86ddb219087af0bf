"""Straggler timeline: per-rank compute / wait / communicate spans of a real traced run.

Pure drawing: :func:`draw_timeline` (one run) and :func:`draw_comparison` (several runs on one time scale)
take ``RankResults.spans`` (a list per rank of :class:`mgpu_helpers.measure.trace.Span`) and return a matplotlib
Figure. :func:`show_straggler` wraps them in ipywidgets: choose the shards, run
:func:`mgpu_helpers.measure.workloads.straggler_step` on real ranks, see the timeline.
"""
from __future__ import annotations

import statistics

from mgpu_helpers.widgets import style

PRESETS = {"12/6/4/2 (uneven)": (12, 6, 4, 2), "6/6/6/6 (balanced)": (6, 6, 6, 6)}
DRAWN_KINDS = ("compute", "wait", "communicate")


def totals_by_kind(spans_per_rank) -> list[dict]:
    """Per rank, the seconds spent in each span kind: ``[{"compute": s, "wait": s, ...}, ...]``."""
    out = []
    for spans in spans_per_rank:
        t = {}
        for s in spans:
            t[s.kind] = t.get(s.kind, 0.0) + s.seconds
        out.append(t)
    return out


def wait_by_rank(spans_per_rank) -> list[float]:
    """Seconds each rank spent waiting at collectives (its "wait" spans)."""
    return [t.get("wait", 0.0) for t in totals_by_kind(spans_per_rank)]


def median_waits(values) -> list[float]:
    """Per rank, the median over steps of its wait at the collective (seconds), from ``RankResults.values``.

    A median, not a sum: on a busy machine another process can stall one rank for one step, which moves
    a sum over steps but not the median of several steps.
    """
    return [statistics.median(v["wait_s"]) for v in values]


def median_worst_wait(values) -> float:
    """The median over steps of that step's largest wait (any rank): how long the earliest rank idles."""
    steps = len(values[0]["wait_s"])
    return statistics.median(max(v["wait_s"][k] for v in values) for k in range(steps))


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


def run_traced(shards, steps: int = 5, timeout: float = 60.0):
    """Run :func:`mgpu_helpers.measure.workloads.straggler_step` on ``len(shards)`` real ranks; returns RankResults."""
    from mgpu_helpers.launcher import launch
    from mgpu_helpers.measure import workloads
    return launch.run_ranks(workloads.straggler_step, len(shards), args=(tuple(shards), None, steps),
                            timeout=timeout, stream=False, quiet=True)


def parse_shards(text: str) -> tuple:
    """"12/6/4/2" -> (12.0, 6.0, 4.0, 2.0); raises ValueError for anything else (1..8 positive numbers)."""
    parts = [p for p in text.replace(",", "/").split("/") if p.strip()]
    vals = tuple(float(p) for p in parts)
    if not 1 <= len(vals) <= 8 or any(v <= 0 for v in vals):
        raise ValueError(f"give 1 to 8 positive shard sizes like 12/6/4/2, got {text!r}")
    return vals


def show_straggler(default: str = "12/6/4/2", steps: int = 2):
    """ipywidgets: a shard box ("12/6/4/2"), presets, a Run button; each run is real and traced."""
    import ipywidgets as W
    import matplotlib.pyplot as plt
    from IPython.display import display

    box = W.Text(value=default, description="shards")
    preset = W.Dropdown(options=["(custom)"] + list(PRESETS), value="(custom)", description="preset")
    n_steps = W.IntSlider(value=steps, min=1, max=5, description="steps")
    button = W.Button(description="Run on real ranks", button_style="primary")
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
            res = run_traced(shards, n_steps.value)
            fig = draw_timeline(res.spans, f"shards {box.value} on {res.backend} ranks",
                                [f"rank {r} ({shards[r]:g})" for r in range(len(shards))])
            display(fig)
            plt.close(fig)

    preset.observe(on_preset, names="value")
    button.on_click(on_run)
    return W.VBox([W.HBox([box, preset]), W.HBox([n_steps, button]), out])

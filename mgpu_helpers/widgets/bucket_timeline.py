"""Bucket timeline: per rank, the backward on one lane and each collective, from issue to completion, on another;
the part of a collective after the backward ended is drawn in the wait colour: communication not hidden."""

import matplotlib.pyplot as plt

from mgpu_helpers.widgets import style


def _bar(ax, y: float, start: float, end: float, t0: float, height: float, kind: str) -> None:
    """One bar on lane ``y`` from ``start`` to ``end`` (seconds), drawn in ms from ``t0``."""
    look = dict(color=style.KIND_COLOURS[kind], edgecolor="white", linewidth=0.5)
    ax.barh(y, (end - start) * 1e3, left=(start - t0) * 1e3, height=height, **look)


def _lanes(ax, spans_per_rank, t0: float) -> float:
    """Draw one run; returns the last end time (ms from ``t0``)."""
    for r, spans in enumerate(spans_per_rank):
        backward = [s for s in spans if s.kind == "compute" and s.name.startswith("backward")]
        comm = [s for s in spans if s.kind == "communicate"]
        for s in backward:
            _bar(ax, 2 * r, s.start, s.end, t0, 0.7, "compute")
        for s in comm:
            last_bw_end = max((b.end for b in backward if b.start <= s.start), default=s.start)
            hidden_end = min(s.end, last_bw_end)
            if hidden_end > s.start:
                _bar(ax, 2 * r + 0.8, s.start, hidden_end, t0, 0.55, "communicate")
            start = max(s.start, hidden_end)
            if s.end > start:
                _bar(ax, 2 * r + 0.8, start, s.end, t0, 0.55, "wait")
    ticks = [y for r in range(len(spans_per_rank)) for y in (2 * r, 2 * r + 0.8)]
    names = [n for r in range(len(spans_per_rank)) for n in (f"rank {r} backward", f"rank {r} comm")]
    ax.set_yticks(ticks, names)
    ax.invert_yaxis()
    ends = [s.end for spans in spans_per_rank for s in spans if s.kind in ("compute", "communicate")]
    return (max(ends, default=t0) - t0) * 1e3


def draw_bucket_timelines(runs: dict, steps: int | None = None):
    """Several runs (``{title: spans_per_rank}``) stacked on one time axis, each from its own first span;
    ``steps``: only the first ``steps`` backward spans of each rank and what starts before the next one."""
    st = style.current()
    size = style.figsize(8, 0.75 * sum(len(v) for v in runs.values()) + 1.1 * len(runs))
    fig, axes = plt.subplots(len(runs), 1, sharex=True, squeeze=False, figsize=size)
    right = 0.0
    for ax, (title, spans_per_rank) in zip(axes[:, 0], runs.items()):
        if steps is not None:  # each rank's spans that start before its (steps + 1)-th backward
            cut = []
            for spans in spans_per_rank:
                bw = sorted(s.start for s in spans if s.kind == "compute" and s.name.startswith("backward"))
                cut.append([s for s in spans if len(bw) <= steps or s.start < bw[steps]])
            spans_per_rank = cut
        t0 = min((s.start for spans in spans_per_rank for s in spans), default=0.0)
        right = max(right, _lanes(ax, spans_per_rank, t0))
        ax.set_title(title, fontsize=st.font_size)
        ax.grid(axis="x", alpha=0.3)
    axes[0, 0].set_xlim(0, right * 1.02 if right else 1)  # the axes share x
    axes[-1, 0].set_xlabel("time (ms)")
    kinds = {"backward": "compute", "all-reduce during backward": "communicate"}
    kinds["all-reduce after backward (waited for)"] = "wait"
    legend = dict(loc="upper center", ncol=3, fontsize=st.font_size * 0.8)
    style.patch_legend(fig, {label: style.KIND_COLOURS[kind] for label, kind in kinds.items()}, **legend)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig

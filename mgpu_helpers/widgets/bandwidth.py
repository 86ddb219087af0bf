"""Figures of the rows :mod:`mgpu_helpers.measure.sweep` measures."""

import matplotlib.pyplot as plt

from mgpu_helpers.report import tables
from mgpu_helpers.report.sizes import format_bytes
from mgpu_helpers.widgets import style

OP_COLOURS = {"all_reduce": "blue", "reduce_scatter": "orange", "all_gather": "green", "rs_ag": "purple"}


def draw_busbw(rows, reference: dict | None = None, title: str = "bus bandwidth by message size"):
    """busbw (GB/s) against message size, one line per op; ``reference``: ``{op: [(nbytes, busbw), ...]}``
    drawn dashed (e.g. :func:`mgpu_helpers.report.nccltests.reference_curves`); ``rows``: ``SweepRow`` or dicts."""
    rows = [tables.as_dict(r) for r in rows]
    st = style.current()
    fig, ax = plt.subplots(figsize=style.figsize(7, 4))
    for op in dict.fromkeys(r["op"] for r in rows):
        pts = sorted((r["nbytes"], r["busbw"]) for r in rows if r["op"] == op)
        colour = style.PALETTE[OP_COLOURS.get(op, "black")]
        ax.plot(*zip(*pts), marker="o", color=colour, label=op, linewidth=st.line_width)
        if reference and reference.get(op):
            dashed = dict(linestyle="--", color=colour, alpha=0.6, linewidth=st.line_width * 0.8)
            ax.plot(*zip(*sorted(reference[op])), **dashed, label=f"{op} (nccl-tests, 2 x H200)")
    sizes = sorted({r["nbytes"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [format_bytes(s) for s in sizes], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set(yscale="log", xlabel="message size", ylabel="busbw (GB/s)")
    ax.set_title(title, fontsize=st.font_size)
    ax.grid(alpha=0.3, which="both")
    ax.legend(frameon=False, fontsize=st.font_size * 0.75)
    fig.tight_layout()
    return fig


def draw_step_breakdown(step_rows, title: str = "one step: compute, wait, all-reduce"):
    """Stacked compute, wait, communicate bars per message size, the compute share above each."""
    st = style.current()
    fig, ax = plt.subplots(figsize=style.figsize(7, 4))
    xs = range(len(step_rows))
    bottom = [0.0] * len(step_rows)
    for key, kind in (("compute_us", "compute"), ("wait_us", "wait"), ("comm_us", "communicate")):
        vals = [r[key] / 1e3 for r in step_rows]
        ax.bar(xs, vals, bottom=bottom, color=style.KIND_COLOURS[kind], label=kind, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for x, r, top in zip(xs, step_rows, bottom):
        ax.text(x, top, f"{r['efficiency']:.0%}", ha="center", va="bottom", fontsize=st.font_size * 0.8)
    ax.set_xticks(list(xs), [format_bytes(r["nbytes"]) for r in step_rows], rotation=45, ha="right")
    ax.set(xlabel="all-reduce message size (number above a bar: compute share of the step)", ylabel="ms per step")
    ax.set_title(title, fontsize=st.font_size)
    ax.legend(frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig

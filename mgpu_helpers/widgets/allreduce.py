"""Collectives drawn as grids of boxes, one row per rank: a real run's inputs and outputs, the hand-written ring's
steps, and one all-reduce beside a reduce-scatter then an all-gather. Pure drawings; the widgets add controls."""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.patches import FancyBboxPatch, Rectangle

from mgpu_helpers.models.collectives import COLLECTIVES, PATTERNS, REDUCE_OPS, REDUCING
from mgpu_helpers.widgets import style
from mgpu_helpers.widgets.style import cjk_fonts, zh_or_en


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.2e}"


# A box's label: centred, and left out of the layout (hundreds of texts made constrained layout slow).
_CENTRED = dict(ha="center", va="center", in_layout=False)


def _table(ax, rows, title: str, colours) -> None:
    """Draw rows of numbers as a grid of boxes; a None row is drawn as 'nothing received'."""
    st = style.current()
    width = max([len(r) for r in rows if r is not None] + [1])
    boxes = []
    for r, row in enumerate(rows):
        ax.text(-0.55, r, f"rank {r}", ha="right", va="center", fontsize=st.font_size)
        if row is None:
            grey = dict(color=style.PALETTE["grey"], style="italic")
            ax.text(0, r, "(receives nothing)", ha="left", va="center", fontsize=st.font_size * 0.9, **grey)
        for i, v in enumerate(row or ()):
            boxes.append(_box(i, r, colours[r % len(colours)]))
            ax.text(i, r, _fmt(v), fontsize=st.font_size * (0.9 if width < 10 else 0.7), **_CENTRED)
    _finish(ax, boxes, (-2.1, max(width, 3) - 0.4), (len(rows) - 0.4, -0.9), title, st.font_size * 1.1)


def _finish(ax, boxes, xlim, ylim, title: str, title_size: float) -> None:
    """The boxes as one collection, drawn in list order (one artist, not one ``add_patch`` each: hundreds of
    patches drew slowly), then these limits, equal aspect, no axis lines and the title."""
    ax.add_collection(PatchCollection(boxes, match_original=True), autolim=False)
    ax.set(xlim=xlim, ylim=ylim, aspect="equal")
    ax.axis("off")
    ax.set_title(title, fontsize=title_size, y=1.0)  # a fixed y: no costly title placement


def _box(x, y, colour, rounded: bool = True):
    """One value's box; plain rectangles where a frame has n * n of them (rounded boxes draw slowly)."""
    look = dict(facecolor=colour, alpha=0.35, edgecolor=colour, linewidth=style.current().line_width / 2)
    if rounded:
        return FancyBboxPatch((x - 0.42, y - 0.36), 0.84, 0.72, boxstyle="round,pad=0.02", **look)
    return Rectangle((x - 0.42, y - 0.36), 0.84, 0.72, **look)


def _outline(x, y):
    """The frame around the chunk a rank has just received."""
    black = style.PALETTE["black"]
    return Rectangle((x - 0.46, y - 0.4), 0.92, 0.8, fill=False, edgecolor=black, linewidth=style.current().line_width)


_RANK_COLOURS = [style.PALETTE[k] for k in ("blue", "orange", "green", "purple", "sky", "vermillion", "yellow", "grey")]


def draw_collective(name: str, inputs, outputs, op: str = "sum", title: str | None = None):
    """Each rank's input (left) and output (right, None: receives nothing) of collective ``name``."""
    n = len(inputs)
    width = max([len(r) for r in list(inputs) + list(outputs) if r is not None] + [1])
    w_in = max(len(r) for r in inputs)
    fig = plt.figure(figsize=style.figsize(2.2 + 0.55 * (w_in + width), 0.9 + 0.45 * n), layout="constrained")
    axes = fig.subplots(1, 2, width_ratios=[max(w_in, 3) + 1.7, max(width, 3) + 1.7])
    what = name + (f" ({op})" if name in REDUCING else "")
    _table(axes[0], [list(r) for r in inputs], "input (before)", _RANK_COLOURS)
    _table(axes[1], [None if r is None else list(r) for r in outputs], f"output of {what}", _RANK_COLOURS)
    if title:
        fig.suptitle(title, fontsize=style.current().font_size * 1.2)
    return fig


def _label(value: float, world_size: int, as_ranks: bool) -> str:
    if as_ranks and value == int(value) and 0 < value < 2**world_size:
        return _ranks_label([r for r in range(world_size) if int(value) >> r & 1], world_size)
    return _fmt(value)


def draw_ring_steps(records, as_ranks: bool = True, max_steps: int | None = None):
    """What each rank holds after every step of the hand-written ring (``records[rank]``), the chunk just received
    outlined; ``as_ranks``: with inputs 2**rank, each value written as the ranks it sums ("1+2")."""
    n = len(records)
    steps = len(records[0]) if max_steps is None else min(max_steps, len(records[0]))
    length = len(records[0][0][-1])
    st = style.current()
    # Two rows: the input then the reduce-scatter steps; the all-gather steps below them.
    cols = max(1, (steps + 1) // 2) if steps > 1 else 1
    size = style.figsize(0.9 + cols * (0.62 * length + 0.3), 2 * (0.7 + 0.42 * n))
    fig = plt.figure(figsize=size, layout="constrained")
    grid = np.atleast_2d(fig.subplots(2 if steps > 1 else 1, cols))
    for ax in grid.flat:
        ax.axis("off")
    # The ring's chunks: contiguous, the first length % n one element longer (as torch.tensor_split cuts them).
    chunk_of = np.concatenate([[c] * len(part) for c, part in enumerate(np.array_split(np.arange(length), n))])
    for k in range(steps):
        ax = grid.flat[k] if k < cols else grid[1, (k - cols) % cols] if grid.shape[0] > 1 else grid.flat[k]
        phase, step, _sent, _recv = records[0][k][:4]
        boxes, outlines = [], []
        for r in range(n):
            got = records[r][k][3]
            for i, v in enumerate(np.asarray(records[r][k][-1], dtype=float)):
                boxes.append(_box(i, r, _RANK_COLOURS[chunk_of[i] % len(_RANK_COLOURS)]))
                if got is not None and chunk_of[i] == got:
                    outlines.append(_outline(i, r))
                ax.text(i, r, _label(v, n, as_ranks), fontsize=st.font_size * 0.7, **_CENTRED)
            ax.text(-0.6, r, f"rank {r}", ha="right", va="center", fontsize=st.font_size * 0.75)
        title = "input" if phase == "input" else f"{phase} step {step + 1}"
        _finish(ax, boxes + outlines, (-2.0, length - 0.4), (n - 0.4, -0.8), title, st.font_size * 0.85)
    return fig


def show_allreduce(runner, world_size: int = 4, name: str = "all_reduce", pattern: str = "rank", op: str = "sum"):
    """ipywidgets: collective, op, world size and inputs; Run calls ``runner(name, world_size, pattern, op)``."""
    import ipywidgets as w

    coll = w.Dropdown(options=list(COLLECTIVES), value=name, description="collective")
    opw = w.Dropdown(options=list(REDUCE_OPS), value=op, description="op")
    ws = w.IntSlider(value=world_size, min=2, max=8, description="world size")
    pat = w.Dropdown(options=list(PATTERNS), value=pattern, description="inputs")
    run = w.Button(description="Run", button_style="primary", icon="play")
    out = w.Output()

    def on_run(_=None):
        out.clear_output(wait=True)
        with out:
            run.disabled = True
            try:
                fig, result = runner(coll.value, ws.value, pat.value, opw.value)
                style.show(fig)
                ok = "every rank's output matches" if result.ok else "MISMATCH: some rank's output differs from"
                print(ok + " the expected result")
            except Exception as exc:  # show the error in the widget, keep the widget usable
                print(f"{type(exc).__name__}: {exc}")
            finally:
                run.disabled = False

    run.on_click(on_run)
    return w.VBox([w.HBox([coll, opw]), w.HBox([ws, pat, run]), out])


# chunk colours without green: green marks a chunk that sums every rank
_CHUNK_COLOURS = [style.PALETTE[k] for k in ("blue", "orange", "sky", "purple", "yellow", "vermillion", "grey")]


def _ranks_label(ranks, world_size: int) -> str:
    return "all" if len(ranks) == world_size else "+".join(str(r) for r in sorted(ranks))


def step_caption(steps, k: int) -> str:
    """Chinese line for frame ``k``: which phase and step, and what each rank has sent so far."""
    f = steps.frames[k]
    n = steps.world_size
    if f.phase == "input":
        return f"输入：每个 Rank 的每一片只含自己的数据（{n} 个 Rank，每片 S/{n}）。"
    name = "Reduce-Scatter" if f.phase == "reduce_scatter" else "All-Gather"
    line = f"第 {k} 步（{name} 的第 {f.step + 1} 步）：每个 Rank 到现在一共发出 {f.sent[0]:.3g} × S。"
    if k == steps.rs_done:
        line += "Reduce-Scatter 到此结束：每个 Rank 恰好有一片是全部 Rank 的总和（自己那一片）。"
    if k == len(steps.frames) - 1:
        line += f"All-Reduce 完成：两种做法都发出了 2(n-1)/n × S = {f.sent[0]:.3g} × S。"
    return line


def _draw_frame(ax, steps, k: int, split: bool, title: str) -> None:
    """Ranks as rows, chunks as columns. ``split``: the reduce-scatter + all-gather view, in which, between the
    two calls, a rank keeps only its own chunk (the others are not part of the result)."""
    st = style.current()
    f = steps.frames[k]
    n = steps.world_size
    boxes, outlines = [], []
    for r in range(n):
        ax.text(-0.6, r, f"rank {r}", ha="right", va="center", fontsize=st.font_size * 0.8)
        for c in range(n):
            if split and f.phase == "reduce_scatter" and k == steps.rs_done and c != steps.owned_after_rs(r):
                ax.text(c, r, "—", color=style.PALETTE["grey"], fontsize=st.font_size * 0.8, **_CENTRED)
                continue
            full = len(f.holds[r][c]) == n
            boxes.append(_box(c, r, style.PALETTE["green"] if full else _CHUNK_COLOURS[c % len(_CHUNK_COLOURS)], False))
            label = _ranks_label(f.holds[r][c], n)
            ax.text(c, r, label, fontsize=st.font_size * (0.75 if n <= 4 else 0.55), **_CENTRED)
            if f.received[r] == c:
                outlines.append(_outline(c, r))
    _finish(ax, boxes + outlines, (-1.9, n - 0.4), (n - 0.4, -0.9), title, st.font_size * 0.9)


def draw_step(steps, k: int):
    """Frame ``k`` of ``steps`` (a ``RingSteps``): one all-reduce left, reduce-scatter + all-gather right."""
    if not 0 <= k < len(steps.frames):
        raise ValueError(f"step must be in 0..{len(steps.frames) - 1}, got {k}")
    return _frames_figure(steps, [k], sent=False, top=0.88)


def draw_rs_ag_vs_all_reduce(steps):
    """The input, the end of the reduce-scatter half and the end, both ways (rows), with the bytes sent so far."""
    return _frames_figure(steps, (0, steps.rs_done, len(steps.frames) - 1), sent=True, top=0.92)


def _frames_figure(steps, keys, sent: bool, top: float):
    """Frames ``keys`` as columns, one all-reduce in the top row, reduce-scatter + all-gather in the bottom one
    (side by side for a single frame); ``sent`` adds the bytes each rank has sent to the titles."""
    n, cols = steps.world_size, len(keys)
    shape = (2, cols) if cols > 1 else (1, 2)
    with cjk_fonts():
        fig, axes = plt.subplots(*shape, figsize=style.figsize(shape[1] * (0.75 * n + 1.6), shape[0] * (0.55 * n + 1)))
        for col, k in enumerate(keys):
            f = steps.frames[k]
            where = f"{'RS' if f.phase == 'reduce_scatter' else 'AG'} {f.step + 1}/{n - 1}"
            where = zh_or_en("输入", "input") if f.phase == "input" else where
            call, nth = ("all_gather", "二") if f.phase == "all_gather" else ("reduce_scatter", "一")
            two = zh_or_en(f"{call}（两次调用之{nth}）· {where}", f"{call} - {where}")
            if f.phase == "reduce_scatter" and k == steps.rs_done:
                two = zh_or_en("Reduce-Scatter 结束：只留自己那一片", "after reduce_scatter: own chunk only")
            one = zh_or_en(f"All-Reduce（一次调用）· {where}", f"all_reduce (one call) - {where}")
            extra = f"  [{f.sent[0]:.3g} S]" if sent else ""
            for row, title in enumerate((one, two)):
                _draw_frame(axes.reshape(2, cols)[row, col], steps, k, bool(row), title + extra)
        fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=top, wspace=0.1, hspace=0.25)
    return fig


def show_steps(steps):
    """ipywidgets: a step slider over the frames of ``steps``, redrawing :func:`draw_step` and its caption."""
    import ipywidgets as w

    slider = w.IntSlider(value=0, min=0, max=len(steps.frames) - 1, description="第几步", continuous_update=False)
    out = w.Output()

    def redraw(_=None):
        style.show_in(out, draw_step, steps, slider.value, text=step_caption(steps, slider.value))

    slider.observe(redraw, names="value")
    redraw()
    return w.VBox([slider, out])

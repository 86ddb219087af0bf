"""Collectives drawn as grids of boxes, one row per rank. Pure drawings; the widgets add controls."""

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
_RANK_COLOURS = [style.PALETTE[k] for k in ("blue", "orange", "green", "purple", "sky", "vermillion", "yellow", "grey")]
# What differs between the three grids: where the rank names sit and their size, the axes' left and top ends, the
# title's size, and rounded boxes (plain rectangles where a frame has n * n of them: rounded ones draw slowly).
_LOOKS = {
    "table": dict(rank_x=-0.55, rank_size=1.0, left=-2.1, top=-0.9, title_size=1.1, rounded=True),
    "ring": dict(rank_x=-0.6, rank_size=0.75, left=-2.0, top=-0.8, title_size=0.85, rounded=True),
    "frame": dict(rank_x=-0.6, rank_size=0.8, left=-1.9, top=-0.9, title_size=0.9, rounded=False),
}


def _grid(ax, rows, title: str, look: str, label_size: float, right: float) -> None:
    """One row of boxes per rank: ``rows[r]`` holds rank r's cells as ``(colour, text, outlined)``; a cell without
    a colour is grey text only, ``outlined`` frames the chunk just received. The boxes go in as one collection
    (one ``add_patch`` each drew hundreds of patches slowly), outlines last so that they stay on top."""
    st, lk = style.current(), _LOOKS[look]
    kind, shape = (FancyBboxPatch, dict(boxstyle="round,pad=0.02")) if lk["rounded"] else (Rectangle, {})
    grey = dict(color=style.PALETTE["grey"], fontsize=st.font_size * lk["rank_size"], **_CENTRED)
    frame = dict(fill=False, edgecolor=style.PALETTE["black"], linewidth=st.line_width)
    boxes, outlines = [], []
    for r, cells in enumerate(rows):
        ax.text(lk["rank_x"], r, f"rank {r}", ha="right", va="center", fontsize=st.font_size * lk["rank_size"])
        for x, (colour, text, outlined) in enumerate(cells):
            if colour is None:
                ax.text(x, r, text, **grey)
                continue
            face = dict(facecolor=colour, alpha=0.35, edgecolor=colour, linewidth=st.line_width / 2, **shape)
            boxes.append(kind((x - 0.42, r - 0.36), 0.84, 0.72, **face))
            ax.text(x, r, text, fontsize=st.font_size * label_size, **_CENTRED)
            if outlined:
                outlines.append(Rectangle((x - 0.46, r - 0.4), 0.92, 0.8, **frame))
    ax.add_collection(PatchCollection(boxes + outlines, match_original=True), autolim=False)
    ax.set(xlim=(lk["left"], right), ylim=(len(rows) - 0.4, lk["top"]), aspect="equal")
    ax.axis("off")
    ax.set_title(title, fontsize=st.font_size * lk["title_size"], y=1.0)  # a fixed y: no costly title placement


def _table(ax, rows, title: str) -> None:
    """Rows of numbers, coloured by rank; a None row is written as 'nothing received'."""
    width = max([len(r) for r in rows if r is not None] + [1])
    cells = [[(_RANK_COLOURS[r % len(_RANK_COLOURS)], _fmt(v), False) for v in row or ()] for r, row in enumerate(rows)]
    _grid(ax, cells, title, "table", 0.9 if width < 10 else 0.7, max(width, 3) - 0.4)
    grey = dict(color=style.PALETTE["grey"], style="italic", fontsize=style.current().font_size * 0.9)
    for r in (r for r, row in enumerate(rows) if row is None):
        ax.text(0, r, "(receives nothing)", ha="left", va="center", **grey)


def draw_collective(name: str, inputs, outputs, op: str = "sum", title: str | None = None):
    """Each rank's input (left) and output (right, None: receives nothing) of collective ``name``."""
    width = max([len(r) for r in list(inputs) + list(outputs) if r is not None] + [1])
    w_in = max(len(r) for r in inputs)
    fig = plt.figure(figsize=style.figsize(2.2 + 0.55 * (w_in + width), 0.9 + 0.45 * len(inputs)), layout="constrained")
    axes = fig.subplots(1, 2, width_ratios=[max(w_in, 3) + 1.7, max(width, 3) + 1.7])
    what = name + (f" ({op})" if name in REDUCING else "")
    _table(axes[0], [list(r) for r in inputs], "input (before)")
    _table(axes[1], [None if r is None else list(r) for r in outputs], f"output of {what}")
    if title:
        fig.suptitle(title, fontsize=style.current().font_size * 1.2)
    return fig


def _label(value: float, world_size: int) -> str:
    """A whole value below 2**n as the ranks it sums, inputs being 2**rank ("1+2"); any other as a number."""
    if value == int(value) and 0 < value < 2**world_size:
        return _ranks_label([r for r in range(world_size) if int(value) >> r & 1], world_size)
    return _fmt(value)


def draw_ring_steps(records):
    """What each rank holds after every step of the hand-written ring (``records[rank]``), the chunk just received
    outlined; with inputs 2**rank, each value is written as the ranks it sums ("1+2")."""
    n, steps, length = len(records), len(records[0]), len(records[0][0][-1])
    # Two rows: the input then the reduce-scatter steps; the all-gather steps below them.
    cols = (steps + 1) // 2
    size = style.figsize(0.9 + cols * (0.62 * length + 0.3), 2 * (0.7 + 0.42 * n))
    fig = plt.figure(figsize=size, layout="constrained")
    axes = list(fig.subplots(2 if steps > 1 else 1, cols, squeeze=False).flat)
    for ax in axes[steps:]:
        ax.axis("off")
    # The ring's chunks: contiguous, the first length % n one element longer (as torch.tensor_split cuts them).
    chunk_of = np.concatenate([[c] * len(part) for c, part in enumerate(np.array_split(np.arange(length), n))])
    colours = [_RANK_COLOURS[c % len(_RANK_COLOURS)] for c in chunk_of]
    for k, ax in enumerate(axes[:steps]):
        phase, step = records[0][k][:2]
        # each element in its chunk's colour, outlined where its chunk has just been received
        cells = [list(zip(colours, [_label(float(v), n) for v in r[k][-1]], chunk_of == r[k][3])) for r in records]
        _grid(ax, cells, "input" if phase == "input" else f"{phase} step {step + 1}", "ring", 0.7, length - 0.4)
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
    f, n = steps.frames[k], steps.world_size
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
    two calls, rank r keeps only its own chunk r (the others are not part of the result)."""
    f, n = steps.frames[k], steps.world_size
    own_only = split and f.phase == "reduce_scatter" and k == steps.rs_done

    def cell(r: int, c: int):
        if own_only and c != r:
            return None, "—", False
        colour = style.PALETTE["green"] if len(f.holds[r][c]) == n else _CHUNK_COLOURS[c % len(_CHUNK_COLOURS)]
        return colour, _ranks_label(f.holds[r][c], n), f.received[r] == c

    _grid(ax, [[cell(r, c) for c in range(n)] for r in range(n)], title, "frame", 0.75 if n <= 4 else 0.55, n - 0.4)


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

    style.redraw_on([slider], redraw)
    return w.VBox([slider, out])

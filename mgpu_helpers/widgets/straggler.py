"""Straggler timelines, one row per rank: of traced runs (``RankResults.spans``) and of the modelled run."""

import matplotlib.pyplot as plt

from mgpu_helpers.launcher.trace import Span
from mgpu_helpers.measure.straggler import wait_by_rank  # the label beside each bar
from mgpu_helpers.widgets import style

PRESETS = {"12/6/4/2（不均衡）": (12, 6, 4, 2), "6/6/6/6（均衡）": (6, 6, 6, 6)}
DRAWN_KINDS = ("compute", "wait", "communicate")


def _timeline(ax, spans_per_rank, kinds, notes, room: float, title: str, labels=None) -> tuple[float, float]:
    """Each rank's spans of ``kinds`` on its row in ms from the run's first span, ``notes`` right of the rows, the
    x axis to ``room`` x the run's end; returns ``(t0, the axis' right end)``. One ``broken_barh`` a kind and rank:
    a run has dozens of spans, and one ``barh`` each was most of a timeline's drawing time."""
    st = style.current()
    t0 = min((s.start for spans in spans_per_rank for s in spans), default=0.0)
    x_end = (max((s.end for spans in spans_per_rank for s in spans), default=t0) - t0) * 1e3 or 1.0
    for r, (spans, note) in enumerate(zip(spans_per_rank, notes)):
        for kind in kinds:
            ranges = [((s.start - t0) * 1e3, s.seconds * 1e3) for s in spans if s.kind == kind and s.seconds > 0]
            if ranges:
                look = dict(facecolors=style.KIND_COLOURS[kind], edgecolor="white", linewidth=0.5)
                ax.broken_barh(ranges, (r - 0.3, 0.6), **look)
        ax.text(x_end * 1.01, r, note, va="center", fontsize=st.font_size * 0.8)
    ax.set_yticks(range(len(notes)), labels or [f"rank {r}" for r in range(len(notes))])
    ax.invert_yaxis()
    ax.set_xlim(0, x_end * room)
    ax.set_title(title, fontsize=st.font_size)
    ax.grid(axis="x", alpha=0.3)
    return t0, x_end * room


def draw_timeline(spans_per_rank, title: str = "per-rank timeline", labels=None):
    """One run's spans, one row per rank, in ms from the first span; the wait of each rank written at right."""
    return _runs_figure({title: spans_per_rank}, 0.6, 1.4, 0.92, labels)


def draw_comparison(runs: dict):
    """Several runs (``{title: spans_per_rank}``) stacked, each from its own start, on one shared time axis."""
    return _runs_figure(runs, 0.55, 1.2, 0.94)


def _runs_figure(runs: dict, rank_height: float, run_height: float, top: float, labels=None):
    """One axes a run, each rank's wait at right; ``rank_height``, ``run_height``: the figure's inches per one."""
    size = style.figsize(8, rank_height * sum(len(v) for v in runs.values()) + run_height * len(runs))
    fig, axes = plt.subplots(len(runs), 1, sharex=True, squeeze=False, figsize=size)
    right = 0.0
    for ax, (title, spans) in zip(axes[:, 0], runs.items()):
        notes = [f"wait {w * 1e3:.1f} ms" for w in wait_by_rank(spans)]
        right = max(right, _timeline(ax, spans, DRAWN_KINDS, notes, 1.22, title, labels)[1])
    # The axes share x, so each run's own limit replaces the one before: the longest run sets the scale.
    axes[0, 0].set_xlim(0, right)
    axes[-1, 0].set_xlabel("time (ms)")
    style.patch_legend(fig, {k: style.KIND_COLOURS[k] for k in DRAWN_KINDS}, loc="upper right", ncol=3)
    fig.tight_layout(rect=(0, 0, 1, top))
    return fig


def parse_shards(text: str) -> tuple:
    """ "12/6/4/2" -> (12.0, 6.0, 4.0, 2.0); raises ValueError for anything else (1..8 positive numbers)."""
    message = f"请输入 1 到 8 个正数的 Shard 大小，例如 12/6/4/2；现在是 {text!r}"
    vals = style.parse_numbers(text, message)
    if not 1 <= len(vals) <= 8 or any(v <= 0 for v in vals):
        raise ValueError(message)
    return vals


def show_straggler(runner, default: str = "12/6/4/2", steps: int = 2):
    """ipywidgets: shard sizes ("12/6/4/2"), presets and a Run button; ``runner(shards, steps, seconds_per_unit=...)``
    returns the traced ``RankResults`` (e.g. :func:`mgpu_helpers.measure.straggler.run_traced`)."""
    import ipywidgets as W

    box = W.Text(value=default, description="Shard")
    preset = W.Dropdown(options=["(自己输入)"] + list(PRESETS), value="(自己输入)", description="预设")
    n_steps = W.IntSlider(value=steps, min=1, max=5, description="步数")
    button = W.Button(description="在真实的 Rank 上运行", button_style="primary")
    costs = [("真实的矩阵乘法", None), ("每单位睡 10 ms（确定成本）", 0.010)]
    cost = W.Dropdown(options=costs, value=None, description="计算")
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
            res = runner(shards, n_steps.value, seconds_per_unit=cost.value)
            labels = [f"rank {r} ({shards[r]:g})" for r in range(len(shards))]
            style.show(draw_timeline(res.spans, f"shards {box.value} on {res.backend} ranks", labels))

    preset.observe(on_preset, names="value")
    button.on_click(on_run)
    return W.VBox([W.HBox([box, preset]), W.HBox([n_steps, button]), cost, out])


def model_run(world_size=4, compute_ms=100.0, comm_ms=30.0, late_ms=60.0, slow_rank=1, steps=2):
    """A modelled synchronous run: every rank computes ``compute_ms`` (the slow rank ``late_ms`` longer), then
    enters the all-reduce, which ends ``comm_ms`` after the last rank arrived. Returns ``(spans_per_rank,
    waits)`` like a run without the timestamp barrier: ``waits[r][k]``, the waiting in rank r's k-th one."""
    if not 0 <= slow_rank < world_size:
        raise ValueError(f"slow_rank must be in 0..{world_size - 1}, got {slow_rank}")
    if min(compute_ms, comm_ms, late_ms) < 0:
        raise ValueError("compute_ms, comm_ms and late_ms must be >= 0")
    spans, waits = [[] for _ in range(world_size)], [[] for _ in range(world_size)]
    t = 0.0
    for _ in range(steps):
        arrive = [t + (compute_ms + (late_ms if r == slow_rank else 0.0)) / 1e3 for r in range(world_size)]
        end = max(arrive) + comm_ms / 1e3
        for r in range(world_size):
            spans[r] += [Span("compute", "compute", t, arrive[r]), Span("communicate", "all_reduce", arrive[r], end)]
            waits[r].append(max(arrive) - arrive[r])
        t = end
    return spans, waits


def draw_inside(spans_per_rank, waits, title: str = "waiting inside the all-reduce", labels=None):
    """Compute and all-reduce bars per rank; the first ``waits[r][k]`` seconds of rank r's k-th all-reduce are
    hatched: waiting for the last rank, inside the collective. Each row ends with its median time inside."""
    import statistics

    fig, ax = plt.subplots(figsize=style.figsize(8, 0.6 * len(spans_per_rank) + 1.6))
    comms = [[s for s in spans if s.kind == "communicate"] for spans in spans_per_rank]
    inside = [statistics.median(s.seconds for s in c) if c else 0.0 for c in comms]
    notes = [f"in all-reduce {t * 1e3:.0f} ms" for t in inside]
    t0, _ = _timeline(ax, spans_per_rank, ("compute", "communicate"), notes, 1.32, title, labels)
    waiting = dict(facecolor=style.KIND_COLOURS["communicate"], hatch="////", edgecolor=style.KIND_COLOURS["wait"])
    for r, c in enumerate(comms):
        for s, w in zip(c, waits[r]):
            w = min(max(0.0, w), s.seconds)
            if w > 0:
                ax.barh(r, w * 1e3, left=(s.start - t0) * 1e3, height=0.6, linewidth=0.0, **waiting)
    ax.set_xlabel("time (ms)")
    kinds = {"compute": style.KIND_COLOURS["compute"], "all-reduce": style.KIND_COLOURS["communicate"]}
    legend = dict(loc="upper center", ncol=3, fontsize=style.current().font_size * 0.85)
    style.patch_legend(fig, {**kinds, "waiting, inside the all-reduce": waiting}, **legend)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig


def dial_caption(world_size: int, compute_ms: float, comm_ms: float, late_ms: float) -> str:
    """What the dials' setting means, in numbers (Chinese): the step, the early ranks' collective, idle share."""
    step = compute_ms + late_ms + comm_ms
    early = late_ms + comm_ms
    idle = (world_size - 1) * late_ms / (world_size * step) if step else 0.0
    return (
        f"一步 {step:.0f} ms；早到的 Rank 在 All-Reduce 里 {early:.0f} ms（其中等待 {late_ms:.0f} ms），"
        f"慢的 Rank 只有 {comm_ms:.0f} ms；所有 GPU 合起来有 {100 * idle:.0f}% 的时间在等。"
    )


def draw_dials(world_size=4, compute_ms=100.0, comm_ratio=0.3, late_ms=60.0, slow_rank=1):
    """The dials' picture for one setting (for a static page): ``comm_ratio`` = communication / compute."""
    comm_ms = comm_ratio * compute_ms
    spans, waits = model_run(world_size, compute_ms, comm_ms, late_ms, slow_rank)
    title = f"model: compute {compute_ms:.0f} ms, all-reduce {comm_ms:.0f} ms, rank {slow_rank} {late_ms:.0f} ms late"
    return draw_inside(spans, waits, title)


def show_dials(world_size: int = 4, compute_ms: float = 100.0, comm_ratio: float = 0.3, late_ms: float = 60.0):
    """ipywidgets: dials for communication / compute and the slow rank's delay, redrawing :func:`draw_dials`."""
    import ipywidgets as W

    dial = dict(continuous_update=False, style={"description_width": "initial"})
    ratio = W.FloatSlider(value=comm_ratio, min=0.0, max=2.0, step=0.05, description="通信 / 计算", **dial)
    late = W.FloatSlider(value=late_ms, min=0.0, max=200.0, step=5.0, description="慢的 Rank 晚到 (ms)", **dial)
    slow = W.IntSlider(value=1, min=0, max=world_size - 1, description="慢的是 rank", **dial)
    caption, out = W.HTML(), W.Output()

    def redraw(_=None):
        caption.value = dial_caption(world_size, compute_ms, ratio.value * compute_ms, late.value)
        style.show_in(out, draw_dials, world_size, compute_ms, ratio.value, late.value, slow.value)

    # The first picture is drawn only when a dial moves: drawing into an Output while the cell still runs
    # breaks headless execution (nbclient); the cell shows the same setting with draw_dials beside it.
    style.redraw_on((ratio, late, slow), redraw, now=False)
    caption.value = dial_caption(world_size, compute_ms, comm_ratio * compute_ms, late_ms) + "（拖动旋钮，图会重画）"
    return W.VBox([W.HBox([ratio, late, slow]), caption, out])

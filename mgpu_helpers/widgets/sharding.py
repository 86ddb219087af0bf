"""Sharding widget: the memory each rank needs under a strategy and the bytes each step sends (models.memory)."""

import matplotlib.pyplot as plt

from mgpu_helpers.models import memory
from mgpu_helpers.report import tables
from mgpu_helpers.widgets import style
from mgpu_helpers.widgets.style import cjk_fonts, zh_or_en

PART_LABELS = dict(params="parameters", grads="gradients", optimizer="optimizer state", activations="activations")
PART_LABELS_ZH = memory.PART_ZH
# How the lessons write each strategy: the method's English name ("Data Parallel", ZeRO's own spelling).
STRATEGY_ZH = {s: s.replace("_", " ").title() for s in memory.STRATEGIES} | {"replicate": "整份复制"}
STRATEGY_ZH |= {f"zero{k}": f"ZeRO-{k}" for k in (1, 2, 3)}


def _fits(ok: bool) -> str:
    return zh_or_en("装得下", "fits") if ok else zh_or_en("溢出", "OVER")


def _draw(ax, plan, title: str | None = None, top: float | None = None, legend: bool = True) -> None:
    st = style.current()
    xs = range(len(plan.ranks))
    bottoms = [0.0] * len(plan.ranks)
    for part in memory.PARTS:
        vals = [getattr(r, part) for r in plan.ranks]
        if not any(vals):
            continue
        shared = part not in plan.sharded  # hatched: every rank holds all of it
        name = zh_or_en(PART_LABELS_ZH[part], PART_LABELS[part])
        label = name + (zh_or_en("（复制）", " (replicated)") if shared else "")
        look = dict(color=style.KIND_COLOURS[part], edgecolor="white", hatch="//" if shared else None)
        ax.bar(xs, vals, bottom=bottoms, label=label, width=0.6, **look)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.axhline(plan.capacity, color=style.PALETTE["black"], linestyle="--", linewidth=st.line_width)
    small = st.font_size * 0.8
    capacity = zh_or_en(f"单卡容量 {plan.capacity:g}", f"capacity {plan.capacity:g}")
    box = dict(facecolor="white", alpha=0.8, edgecolor="none", pad=1)
    ax.text(-0.45, plan.capacity, capacity, va="bottom", ha="left", fontsize=small, bbox=box)
    for r, (total, ok) in enumerate(zip(plan.totals, plan.rank_fits)):
        colour = style.PALETTE["black" if ok else "vermillion"]
        ax.text(r, total, f"{total:g}\n{_fits(ok)}", ha="center", va="bottom", fontsize=small, color=colour)
    ax.set_xticks(list(xs), [f"rank {r}" for r in xs])
    top = top or max(max(plan.totals), plan.capacity)
    ax.set(ylim=(0, top * 1.25), ylabel=zh_or_en("每张卡的显存 (GB)", "memory per GPU (GB)"))
    verdict = zh_or_en("装得下", "fits") if plan.fits else zh_or_en("装不下", "does not fit")
    ax.set_title(title or f"{zh_or_en(STRATEGY_ZH[plan.strategy], plan.strategy)}: {verdict}", fontsize=st.font_size)
    if legend:
        ax.legend(fontsize=st.font_size * 0.75, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def draw_memory_plan(plan, title: str | None = None):
    """Stacked per-rank memory bars (hatched = replicated part), the capacity line, fits/OVER labels."""
    with cjk_fonts():
        fig, ax = plt.subplots(figsize=style.figsize(max(5.5, 1.0 * len(plan.ranks) + 4.5), 3.6))
        _draw(ax, plan, title)
        fig.tight_layout()
    return fig


def draw_plans(plans: dict):
    """Several plans side by side (``{title: MemoryPlan}``), on one memory scale."""
    size = style.figsize(3.4 * len(plans) + 1.8, 3.8)
    with cjk_fonts():
        fig, axes = plt.subplots(1, len(plans), sharey=True, squeeze=False, figsize=size)
        top = max(max(max(p.totals), p.capacity) for p in plans.values())
        for ax, (title, plan) in zip(axes[0], plans.items()):
            _draw(ax, plan, title, top=top, legend=False)
        # one legend for all panels, listing every part drawn anywhere (hatched = replicated somewhere)
        handles = {}
        for ax in axes[0]:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        where = dict(loc="upper center", ncol=min(4, len(handles)), frameon=False)
        fig.legend(list(handles.values()), list(handles), **where, fontsize=style.current().font_size * 0.8)
        fig.tight_layout(rect=(0, 0, 1, 0.86))
    return fig


def draw_strategies(rows, title: str | None = None):
    """Every strategy of one job (rows of ``compare_strategies``): the largest rank's memory against one GPU's
    capacity, and the bytes each rank sends per step ("n/a" where the model cannot tell)."""
    st = style.current()
    names = [zh_or_en(STRATEGY_ZH[r.strategy], r.strategy) for r in rows]
    ys = list(range(len(rows)))
    capacity = rows[0].plan.capacity
    with cjk_fonts():
        fig, (ax_m, ax_b) = plt.subplots(1, 2, sharey=True, figsize=style.figsize(10.5, 0.55 * len(rows) + 1.8))
        colours = [style.PALETTE["green"] if r.fits else style.PALETTE["vermillion"] for r in rows]
        ax_m.barh(ys, [r.peak for r in rows], color=colours, height=0.6)
        ax_m.axvline(capacity, color=style.PALETTE["black"], linestyle="--", linewidth=st.line_width)
        for y, r in zip(ys, rows):
            ax_m.text(r.peak, y, f" {r.peak:g} {_fits(r.fits)}", va="center", fontsize=st.font_size * 0.8)
        ax_m.set_xlim(0, max(max(r.peak for r in rows), capacity) * 1.35)
        ax_m.set_yticks(ys, names)
        ax_m.invert_yaxis()
        zh = f"最大的 Rank 要装的显存 (GB)，虚线 = 单卡 {capacity:g} GB"
        ax_m.set_xlabel(zh_or_en(zh, f"memory of the largest rank (GB); dashed = {capacity:g} GB per GPU"))
        sent = [r.step_bytes for r in rows]
        known = [b for b in sent if b is not None] or [1.0]
        ax_b.barh(ys, [b or 0 for b in sent], color=style.KIND_COLOURS["communicate"], height=0.6)
        for y, b in zip(ys, sent):
            text, colour = (" n/a", "grey") if b is None else (f" {b:.3g}", "black")
            ax_b.text(b or 0, y, text, va="center", fontsize=st.font_size * 0.8, color=style.PALETTE[colour])
        ax_b.set_xlim(0, max(max(known), 1e-9) * 1.35)
        ax_b.set_xlabel(zh_or_en("每步每个 Rank 发出的 GB（环）", "GB each rank sends per step (ring)"))
        if title:
            fig.suptitle(title, fontsize=st.font_size * 1.1)
        fig.tight_layout()
    return fig


def describe(plan) -> str:
    """One line per rank plus the verdict and what is replicated (Chinese text twin of the figure)."""
    lines = []
    for r in plan.ranks:
        parts = "，".join(f"{PART_LABELS_ZH[p]} {getattr(r, p):g}" for p in memory.PARTS if getattr(r, p))
        lines.append(f"rank {r.rank}：{r.total:g} GB（{parts or '无'}）")
    per = ", ".join(f"{t:g}" for t in plan.totals)
    rep = "、".join(PART_LABELS_ZH[p] for p in plan.replicated) or "无"
    lines.append(
        f"{STRATEGY_ZH[plan.strategy]}，{len(plan.ranks)} 个 Rank：每个 Rank [{per}] GB，单卡容量 "
        f"{plan.capacity:g} GB -> {'装得下' if plan.fits else '装不下'}；每个 Rank 各存一整份的：{rep}"
    )
    return "\n".join(lines)


def describe_strategies(rows) -> str:
    """The table of :func:`draw_strategies` as Chinese text: memory, verdict and bytes per step, per strategy."""
    dp = next((r.step_bytes for r in rows if r.strategy == "data_parallel"), None)
    heads = {"name": "策略", "peak": "最大 Rank (GB)", "fits": "装得下", "sent": "每步发出 (GB)"}
    columns = [(k, h, "{:g}" if k == "peak" else "{}") for k, h in (heads | {"rel": "相对 Data Parallel"}).items()]
    cells = []
    for r in rows:
        b = r.step_bytes
        sent, rel = ("不在模型内", "") if b is None else (f"{b:.3g}", f"{b / dp:.2g} 倍" if dp else "")
        cells.append(dict(name=STRATEGY_ZH[r.strategy], peak=r.peak, fits="是" if r.fits else "否", sent=sent, rel=rel))
    return tables.format_table(cells, columns)


def _weights(text: str, world_size: int):
    """'14, 10' -> (14.0, 10.0); '' -> None (equal shares). Raises ValueError saying what to write."""
    text = text.strip()
    if not text:
        return None
    values = style.parse_numbers(text, f"权重要写成用逗号分开的 {world_size} 个数，例如 14, 10；现在是 {text!r}")
    if len(values) != world_size:
        raise ValueError(f"权重要有 {world_size} 个（每个 GPU 一个），现在有 {len(values)} 个：{text!r}")
    return values


def show_sharding(
    params=24.0, grads=0.0, optimizer=0.0, activations=0.0, world_size=4, capacity=16.0, strategy="replicate"
):
    """ipywidgets with a task: which strategies fit this job? The learner ticks them; only after the button does
    every strategy's answer appear. The chosen strategy's per-rank bars are drawn all along."""
    import ipywidgets as W

    choices = [(STRATEGY_ZH[s], s) for s in memory.STRATEGIES]

    def slider(desc, value, hi):
        return W.FloatSlider(value=value, min=0, max=hi, step=0.5, description=desc, continuous_update=False)

    controls = dict(params=slider("参数 GB", params, 200), grads=slider("梯度 GB", grads, 200))
    controls |= dict(optimizer=slider("优化器 GB", optimizer, 400), activations=slider("激活 GB", activations, 200))
    gpus = W.IntSlider(value=world_size, min=1, max=16, description="GPU 数", continuous_update=False)
    weights = W.Text(value="", description="权重", placeholder="空 = 平均；如 14, 10", continuous_update=False)
    controls |= dict(world_size=gpus, capacity=slider("单卡 GB", capacity, 192), weights=weights)
    controls["strategy"] = W.Dropdown(options=choices, value=strategy, description="策略")
    goal, note = W.HTML(), W.HTML()
    guess = W.SelectMultiple(options=choices, rows=len(choices), description="我的预测")
    reveal = W.Button(description="先选出装得下的策略，再看答案", layout=W.Layout(width="auto"))
    out, answer = W.Output(), W.Output()
    state = {"revealed": False}

    def current():
        v = {k: c.value for k, c in controls.items()}
        w = _weights(v["weights"], v["world_size"])
        return v, w, {part: v[part] for part in memory.PARTS}

    def draw_answer():
        v, w, sizes = current()
        rows = memory.compare_strategies(v["world_size"], v["capacity"], weights=w, **sizes)
        picked = set(guess.value)
        right = {r.strategy for r in rows if r.fits}
        if picked == right:
            verdict = "你的预测和答案一致。"
        else:
            missed = "、".join(STRATEGY_ZH[s] for s in memory.STRATEGIES if s in right - picked) or "无"
            extra = "、".join(STRATEGY_ZH[s] for s in memory.STRATEGIES if s in picked - right) or "无"
            verdict = f"漏选的（其实装得下）：{missed}；多选的（其实装不下）：{extra}。"
        style.show_in(answer, draw_strategies, rows, text=f"{describe_strategies(rows)}\n{verdict}")

    def redraw(_=None):
        try:
            v, w, sizes = current()
            plan = memory.memory_plan(v["strategy"], v["world_size"], v["capacity"], weights=w, **sizes)
        except ValueError as exc:
            note.value = f"<b>{exc}</b>"
            return
        goal.value = (
            f"<b>目标</b>：把这个模型（参数 {v['params']:g} + 梯度 {v['grads']:g} + 优化器状态 "
            f"{v['optimizer']:g} + 激活 {v['activations']:g} GB）放进 {v['world_size']} 张 "
            f"{v['capacity']:g} GB 的卡：哪些策略装得下，每一步要付多少通信？"
        )
        note.value = f"<b>{STRATEGY_ZH[plan.strategy]}</b>：{plan.note}"
        style.show_in(out, draw_memory_plan, plan, text=describe(plan))
        if state["revealed"]:
            draw_answer()

    def on_reveal(_=None):
        state["revealed"] = True
        draw_answer()

    reveal.on_click(on_reveal)
    style.redraw_on(controls.values(), redraw)
    layout = ("params grads", "optimizer activations", "world_size capacity weights")
    rows = [W.HBox([controls[k] for k in row.split()]) for row in layout]
    return W.VBox([goal, *rows, controls["strategy"], note, out, W.HBox([guess, reveal]), answer])

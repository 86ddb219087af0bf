"""Sharding widget: memory each rank needs under a strategy, stacked by part, against the GPU's capacity.

The numbers come from :func:`mgpu_helpers.models.memory.memory_plan`; this module only draws them.
:func:`draw_memory_plan` / :func:`draw_plans` return a matplotlib Figure (static HTML, tests);
:func:`show_sharding` wraps them in ipywidgets sliders.
"""
from __future__ import annotations

from mgpu_helpers.models import memory
from mgpu_helpers.widgets import style

PART_LABELS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer state",
               "activations": "activations"}


def _draw(ax, plan, title: str | None = None, top: float | None = None, legend: bool = True) -> None:
    st = style.current()
    n = len(plan.ranks)
    xs = range(n)
    bottoms = [0.0] * n
    for part in memory.PARTS:
        vals = [getattr(r, part) for r in plan.ranks]
        if not any(vals):
            continue
        hatch = None if part in plan.sharded else "//"
        ax.bar(xs, vals, bottom=bottoms, color=style.KIND_COLOURS[part], edgecolor="white", hatch=hatch,
               label=PART_LABELS[part] + ("" if part in plan.sharded else " (replicated)"), width=0.6)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.axhline(plan.capacity, color=style.PALETTE["black"], linestyle="--", linewidth=st.line_width)
    ax.text(-0.45, plan.capacity, f"capacity {plan.capacity:g}", va="bottom", ha="left",
            fontsize=st.font_size * 0.8, bbox=dict(facecolor="white", alpha=0.8, edgecolor="none", pad=1))
    for r, (total, ok) in enumerate(zip(plan.totals, plan.rank_fits)):
        ax.text(r, total, f"{total:g}\n{'fits' if ok else 'OVER'}", ha="center", va="bottom",
                fontsize=st.font_size * 0.8, color=style.PALETTE["black" if ok else "vermillion"])
    ax.set_xticks(list(xs), [f"rank {r}" for r in xs])
    top = top or max(max(plan.totals), plan.capacity)
    ax.set_ylim(0, top * 1.25)
    ax.set_ylabel("memory per GPU")
    verdict = "fits" if plan.fits else "does not fit"
    ax.set_title(title or f"{plan.strategy}: {verdict}", fontsize=st.font_size)
    if legend:
        ax.legend(fontsize=st.font_size * 0.75, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def draw_memory_plan(plan, title: str | None = None):
    """Stacked per-rank memory bars (hatched = replicated part), the capacity line, fits/OVER labels."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=style.figsize(max(5.5, 1.0 * len(plan.ranks) + 4.5), 3.6))
    _draw(ax, plan, title)
    fig.tight_layout()
    return fig


def draw_plans(plans: dict):
    """Several plans side by side (``{title: MemoryPlan}``), on one memory scale."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(plans), sharey=True, squeeze=False,
                             figsize=style.figsize(3.4 * len(plans) + 1.8, 3.8))
    top = max(max(max(p.totals), p.capacity) for p in plans.values())
    for ax, (title, plan) in zip(axes[0], plans.items()):
        _draw(ax, plan, title, top=top, legend=False)
    # one legend for all panels, listing every part drawn anywhere (hatched = replicated somewhere)
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=min(4, len(handles)),
               frameon=False, fontsize=style.current().font_size * 0.8)
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    return fig


def describe(plan) -> str:
    """One line per rank plus the verdict and what is replicated (text twin of the figure)."""
    lines = []
    for r in plan.ranks:
        parts = ", ".join(f"{p} {getattr(r, p):g}" for p in memory.PARTS if getattr(r, p))
        lines.append(f"rank {r.rank}: {r.total:g} ({parts or 'nothing'})")
    lines.append(plan.summary())
    return "\n".join(lines)


def show_sharding(params: float = 24.0, grads: float = 0.0, optimizer: float = 0.0, activations: float = 0.0,
                  world_size: int = 4, capacity: float = 16.0, strategy: str = "replicate"):
    """ipywidgets: sizes (GB), number of GPUs, memory per GPU and strategy -> the per-rank memory bars."""
    import ipywidgets as W
    import matplotlib.pyplot as plt
    from IPython.display import display

    def slider(desc, value, hi):
        return W.FloatSlider(value=value, min=0, max=hi, step=0.5, description=desc, continuous_update=False)

    controls = dict(params=slider("params GB", params, 200), grads=slider("grads GB", grads, 200),
                    optimizer=slider("optim GB", optimizer, 400), activations=slider("activ GB", activations, 200),
                    world_size=W.IntSlider(value=world_size, min=1, max=16, description="GPUs", continuous_update=False),
                    capacity=slider("GB per GPU", capacity, 192),
                    strategy=W.Dropdown(options=list(memory.STRATEGIES), value=strategy, description="strategy"))
    out = W.Output()
    note = W.HTML()

    def redraw(_=None):
        v = {k: c.value for k, c in controls.items()}
        plan = memory.memory_plan(v["strategy"], v["world_size"], v["capacity"], params=v["params"],
                                  grads=v["grads"], optimizer=v["optimizer"], activations=v["activations"])
        note.value = f"<b>{plan.strategy}</b>: {plan.note}"
        with out:
            out.clear_output(wait=True)
            fig = draw_memory_plan(plan)
            display(fig)
            plt.close(fig)
            print(describe(plan))

    for c in controls.values():
        c.observe(redraw, names="value")
    redraw()
    c = controls
    return W.VBox([W.HBox([c["params"], c["grads"]]), W.HBox([c["optimizer"], c["activations"]]),
                   W.HBox([c["world_size"], c["capacity"]]), c["strategy"], note, out])

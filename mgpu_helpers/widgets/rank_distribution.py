"""Per-rank time distributions: one box (and its points) per rank and phase, beside the global mean it hides."""

import matplotlib.pyplot as plt
import numpy as np

from mgpu_helpers.widgets import style


def draw_rank_distribution(per_phase: dict, title: str = "per-rank time per step", highlight=None):
    """Box + strip plot, one panel per phase, one box per rank (ms). ``per_phase``: ``{"compute": [[s, ...] per
    rank], ...}`` (e.g. :func:`mgpu_helpers.measure.diagnose.per_rank_phase_times`); ``highlight``: a rank to mark."""
    phases = [k for k in ("compute", "wait", "communicate") if k in per_phase] or list(per_phase)
    st = style.current()
    fig, axes = plt.subplots(1, len(phases), figsize=style.figsize(3.4 * len(phases), 3.4), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, phase in zip(axes[0], phases):
        data = [np.asarray(v, dtype=float) * 1e3 for v in per_phase[phase]]
        n = len(data)
        colour = style.KIND_COLOURS.get(phase, style.PALETTE["grey"])
        median = {"color": "black", "linewidth": st.line_width}
        ax.boxplot(data, positions=range(n), widths=0.5, showfliers=False, medianprops=median)
        for r, d in enumerate(data):
            x = r + rng.uniform(-0.12, 0.12, size=len(d))
            edge = "black" if r == highlight else "none"
            ax.scatter(x, d, s=14 * st.line_width / 1.5, color=colour, alpha=0.8, zorder=3, edgecolor=edge)
        everything = np.concatenate(data) if data else np.zeros(1)
        mean = dict(color=style.PALETTE["grey"], linestyle="--", linewidth=st.line_width * 0.8, label="global mean")
        ax.axhline(everything.mean(), **mean)
        ax.set_xticks(range(n), [f"rank {r}" + (" *" if r == highlight else "") for r in range(n)])
        ax.set_title(phase, fontsize=st.font_size)
        ax.set(ylabel="ms per step", ylim=(0, None))
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(frameon=False, fontsize=st.font_size * 0.8)
    fig.suptitle(title, fontsize=st.font_size * 1.1)
    fig.tight_layout()
    return fig

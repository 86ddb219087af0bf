"""The chapter's knowledge map: CUDA basics -> torch.distributed tools -> communication patterns, each topic with
the notebook that teaches it. Labels are English (the course's terms): no Chinese font needed."""

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from mgpu_helpers.widgets import style

# Each column's topics, with the notebook that teaches each.
_CUDA = [("Host vs Device", "01"), ("Kernel, Grid / Block / Thread", "01"), ("SIMT and warps", "01")]
_CUDA += [("cudaMalloc/cudaMemcpy, checks", "01"), ("block size, registers, occupancy", "02")]
_TOOLS = [("process group: init_process_group", "03"), ("backend: nccl (GPU) / gloo (CPU)", "03")]
_TOOLS += [("init_method: env:// tcp:// file://", "03"), ("rank, world_size, device", "03")]
_TOOLS += [("launch: spawn / torchrun / run_ranks", "03")]
_COMM = [("point-to-point: send / recv", "04"), ("isend / irecv, batch_isend_irecv", "04")]
_COMM += [("Broadcast, Reduce, Gather / Scatter", "05"), ("All-Reduce (DDP gradients)", "05")]
_COMM += [("All-Gather, Reduce-Scatter, ring, busbw", "05")]
# (column title, colour key, [(topic, notebook), ...])
KNOWLEDGE_MAP = [
    ("CUDA basics (the foundation)", "blue", _CUDA),
    ("torch.distributed (the tools)", "orange", _TOOLS),
    ("communication (the core mechanism)", "green", _COMM),
]

# What each arrow between two columns means.
ARROWS = ["one process per GPU;\nNCCL moves\ndevice memory", "a process group\nlets ranks talk"]


def draw_knowledge_map(highlight: int | None = None):
    """Figure of the knowledge map. ``highlight``: index of a column to emphasise (None: none)."""
    st = style.current()
    fig = plt.figure(figsize=style.figsize(13, 6.2))
    ax = fig.add_axes([0, 0, 1, 1], xlim=(0, 13), ylim=(0, 6.2))
    ax.axis("off")
    col_x = [0.2, 4.75, 9.3]
    box_w, box_h, top = 3.5, 0.62, 4.9
    for c, (title, colour_key, topics) in enumerate(KNOWLEDGE_MAP):
        colour = style.PALETTE[colour_key]
        strong = highlight is None or highlight == c
        head = dict(ha="center", va="center", weight="bold", fontsize=st.font_size * 1.15, color=colour)
        ax.text(col_x[c] + box_w / 2, 5.75, title, **head)
        box = dict(boxstyle="round,pad=0.05", facecolor=colour, edgecolor=colour, linewidth=st.line_width)
        grey = dict(ha="right", va="center", fontsize=st.font_size * 0.75, color=style.PALETTE["grey"])
        for r, (topic, nb) in enumerate(topics):
            y = top - r * 0.95
            ax.add_patch(FancyBboxPatch((col_x[c], y - box_h / 2), box_w, box_h, alpha=0.28 if strong else 0.08, **box))
            ax.text(col_x[c] + 0.15, y, topic, ha="left", va="center", fontsize=st.font_size, alpha=0.5 + 0.5 * strong)
            ax.text(col_x[c] + box_w - 0.1, y, f"nb {nb}", **grey)
    # The chapter's main arrows: foundation -> tools -> mechanism.
    arrow = dict(arrowstyle="-|>", mutation_scale=22, linewidth=st.line_width * 1.5, color=style.PALETTE["black"])
    note = dict(ha="center", va="bottom", fontsize=st.font_size * 0.72, color=style.PALETTE["grey"], style="italic")
    for c in range(2):
        x0, x1 = col_x[c] + box_w + 0.08, col_x[c + 1] - 0.08
        for y in (5.75, 2.9):
            ax.add_patch(FancyArrowPatch((x0, y), (x1, y), **arrow))
        ax.text((x0 + x1) / 2, 3.1, ARROWS[c], **note)
    moral = "CUDA is the foundation, torch.distributed the tool, communication the core: all three are needed."
    ax.text(6.5, 0.12, moral, ha="center", va="bottom", fontsize=st.font_size * 0.9)
    return fig


def topics() -> list[tuple[str, str, str]]:
    """Every topic of the map as ``(column title, topic, notebook)``."""
    return [(title, t, nb) for title, _c, ts in KNOWLEDGE_MAP for t, nb in ts]

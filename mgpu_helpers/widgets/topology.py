"""Topology drawn as a matrix: how each GPU reaches each other GPU, coloured by the kind of path."""

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from mgpu_helpers.models.topology import LINK_CLASSES, from_links, link_class
from mgpu_helpers.report import recorded
from mgpu_helpers.widgets import style

# The colour of each kind of path (:data:`mgpu_helpers.models.topology.LINK_CLASSES`, fastest first).
COLOURS = dict(zip(LINK_CLASSES, ("green", "sky", "orange", "vermillion", "grey")))


def draw_link_matrix(links, names=None, title: str = "GPU topology", note: str = ""):
    """``links`` (a square list of lists of words like "X", "NV18", "SYS") as a coloured matrix; ``names`` label
    rows and columns (default GPU0, GPU1, ...), ``note`` is written under it."""
    n = len(links)
    if n == 0 or any(len(row) != n for row in links):
        raise ValueError("links must be a non-empty square matrix")
    names = list(names) if names is not None else [f"GPU{i}" for i in range(n)]
    colours = {name: style.PALETTE[c] for name, c in COLOURS.items()}
    st = style.current()
    side = max(2.6, 0.75 * n + 1.4)
    fig, ax = plt.subplots(figsize=style.figsize(side + 2.6, side))
    used = set()
    label = dict(ha="center", va="center", fontsize=st.font_size)
    for i, row in enumerate(links):
        for j, word in enumerate(row):
            cls = link_class(word)
            used.add(cls)
            alpha = 0.85 if cls != "self (X)" else 0.35
            cell = dict(facecolor=colours[cls], edgecolor="white", linewidth=st.line_width * 1.3, alpha=alpha)
            ax.add_patch(Rectangle((j, i), 1, 1, **cell))
            ax.text(j + 0.5, i + 0.5, word, color="black", fontweight="bold", in_layout=False, **label)
    ax.set(xlim=(0, n), ylim=(n, 0), aspect="equal")
    ax.set_xticks([k + 0.5 for k in range(n)], names)
    ax.set_yticks([k + 0.5 for k in range(n)], names)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_title(title, fontsize=st.font_size * 1.1, pad=24)
    legend = dict(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=st.font_size * 0.85)
    style.patch_legend(ax, {c: colours[c] for c in LINK_CLASSES if c in used}, **legend)
    if note:
        fig.text(0.02, 0.02, note, fontsize=st.font_size * 0.8, color=style.PALETTE["grey"])
    fig.tight_layout(rect=(0, 0.05 if note else 0, 1, 1))
    return fig


def machine_or_recorded(env):
    """``(TopoMatrix, note)``: this machine's NVML links where it has 2+ GPUs, else the 2 x H200 recording."""
    if env is not None and len(env.gpus) >= 2:
        return from_links(env.machine.links, "NVML"), "this machine (NVML)"
    return recorded.topology_matrix(), "recorded on 2 x NVIDIA H200 (nvidia-smi topo -m), not this machine"

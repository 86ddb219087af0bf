"""Thread-index widget: each thread's index ``blockIdx.x * blockDim.x + threadIdx.x``, its warp, the check ``i < N``."""

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from mgpu_helpers.models.occupancy import SmLimits
from mgpu_helpers.widgets import style

MAX_THREADS_PER_BLOCK = SmLimits.max_threads_per_block  # a CUDA limit, the same on every architecture the course runs


@dataclass(frozen=True)
class ThreadMap:
    """Every thread of a 1-D launch ``kernel[grid, block]`` over ``n`` elements, in launch order, one entry per
    thread in each array: ``warp`` is the warp's number across the grid, ``active`` is ``global_idx < n`` (the
    thread passes the bounds check and does work)."""

    grid: int
    block: int
    n: int
    warp_size: int
    block_idx: np.ndarray
    thread_idx: np.ndarray
    global_idx: np.ndarray
    warp_in_block: np.ndarray
    warp: np.ndarray
    active: np.ndarray

    @property
    def total_threads(self) -> int:
        return self.grid * self.block

    @property
    def active_threads(self) -> int:
        return int(self.active.sum())

    @property
    def idle_threads(self) -> int:
        """Threads launched but cut off by ``if (i < N)``."""
        return self.total_threads - self.active_threads

    @property
    def uncovered(self) -> int:
        """Elements no thread handles (the grid is too small: a bug, not idling)."""
        return max(0, self.n - self.total_threads)

    @property
    def warps_per_block(self) -> int:
        """A block of 100 threads still occupies 4 warps: the hardware schedules whole warps."""
        return math.ceil(self.block / self.warp_size)

    def warp_states(self) -> dict[str, int]:
        """Warps all active ("full"), split by the bounds check ("split"), or all idle ("idle")."""
        threads = np.bincount(self.warp)  # every warp of the grid has threads
        working = np.bincount(self.warp, weights=self.active)
        full, idle = int((working == threads).sum()), int((working == 0).sum())
        return {"full": full, "split": len(threads) - full - idle, "idle": idle}

    def summary(self) -> str:
        w = self.warp_states()
        text = (
            f"grid={self.grid} x block={self.block} = {self.total_threads} threads for N={self.n}: "
            f"{self.active_threads} work, {self.idle_threads} idle; "
            f"{self.grid * self.warps_per_block} warps ({w['full']} full, {w['split']} split, {w['idle']} idle)"
        )
        if self.uncovered:
            text += f"; {self.uncovered} elements have NO thread (grid too small)"
        return text


def thread_map(grid: int, block: int, n: int, warp_size: int = 32) -> ThreadMap:
    """The arithmetic of a 1-D launch (:class:`ThreadMap`); ValueError for a grid < 1, a block outside 1..1024
    (a real launch with 1025 threads per block fails) or n < 0."""
    if grid < 1:
        raise ValueError(f"grid must be >= 1 block, not {grid}")
    if not 1 <= block <= MAX_THREADS_PER_BLOCK:
        raise ValueError(f"block must be 1..{MAX_THREADS_PER_BLOCK} threads (a CUDA limit), not {block}")
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    block_idx = np.repeat(np.arange(grid), block)
    thread_idx = np.tile(np.arange(block), grid)
    global_idx = block_idx * block + thread_idx
    warp_in_block = thread_idx // warp_size
    warp = block_idx * math.ceil(block / warp_size) + warp_in_block
    return ThreadMap(grid, block, n, warp_size, block_idx, thread_idx, global_idx, warp_in_block, warp, global_idx < n)


LABEL_LIMIT = 64  # write each thread's global index in its cell only when a block has at most this many


def draw_thread_map(tm: ThreadMap, max_blocks: int = 32):
    """One row per block of ``tm`` (the first ``max_blocks``), one cell per thread (blue works, grey idles), white
    lines between warps, split warps outlined; each thread's global index written where blocks are small."""
    rows = min(tm.grid, max_blocks)
    active = tm.active.reshape(tm.grid, tm.block)[:rows]
    st = style.current()
    width = min(14.0, 2.0 + 0.22 * tm.block) if tm.block <= LABEL_LIMIT else 12.0
    fig, ax = plt.subplots(figsize=style.figsize(max(6.0, width), 1.8 + 0.45 * rows))
    cmap = ListedColormap([style.KIND_COLOURS["idle"], style.KIND_COLOURS["compute"]])
    extent = (-0.5, tm.block - 0.5, rows - 0.5, -0.5)
    ax.imshow(active.astype(int), cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest", extent=extent)
    for w in range(1, tm.warps_per_block):
        ax.axvline(w * tm.warp_size - 0.5, color="white", lw=st.line_width * 1.5)
    for r in range(1, rows):
        ax.axhline(r - 0.5, color="white", lw=st.line_width)
    # Outline the warps in which some threads work and some idle.
    vermillion = style.PALETTE["vermillion"]
    split = dict(fill=False, edgecolor=vermillion, lw=st.line_width * 2.0, zorder=5, label="split warp")
    for b, w in np.ndindex(rows, tm.warps_per_block):
        lo, hi = w * tm.warp_size, min((w + 1) * tm.warp_size, tm.block)
        if active[b, lo:hi].any() and not active[b, lo:hi].all():
            ax.add_patch(Rectangle((lo - 0.5, b - 0.5), hi - lo, 1.0, **split))
    if tm.block <= LABEL_LIMIT:
        label = dict(ha="center", va="center", fontsize=max(5.0, st.font_size * (0.75 if tm.block <= 32 else 0.55)))
        for b, t in np.ndindex(rows, tm.block):
            ax.text(t, b, str(b * tm.block + t), color="white" if active[b, t] else "black", in_layout=False, **label)
    if 1 < tm.warps_per_block <= 32:
        warps = range(0, tm.warps_per_block, 1 if tm.warps_per_block <= 8 else 4)
        centres = [(w * tm.warp_size + min((w + 1) * tm.warp_size, tm.block)) / 2 - 0.5 for w in warps]
        ax.secondary_xaxis("top").set_xticks(centres, [f"warp {w}" for w in warps], fontsize=st.font_size * 0.8)
    legend = {"i < N: works": style.KIND_COLOURS["compute"], "i >= N: idle": style.KIND_COLOURS["idle"]}
    legend["split warp"] = dict(facecolor="none", edgecolor=vermillion)
    style.patch_legend(fig, legend, loc="lower center", ncol=3, fontsize=st.font_size * 0.85)
    ax.set_yticks(range(rows), [f"block {b}" for b in range(rows)])
    ax.set_xlabel("threadIdx.x" + (f"   (warps of {tm.warp_size}: white lines)" if tm.warps_per_block > 1 else ""))
    short = f"grid={tm.grid}, block={tm.block}, N={tm.n}: {tm.active_threads} work, {tm.idle_threads} idle"
    ax.set_title(tm.summary() if len(tm.summary()) < 110 else short, fontsize=st.font_size)
    if rows < tm.grid:
        where = dict(transform=ax.transAxes, ha="right", va="top")
        ax.text(1.0, -0.08, f"first {rows} of {tm.grid} blocks", fontsize=st.font_size * 0.8, **where)
    fig.tight_layout(rect=(0, 0.1 if rows > 2 else 0.16, 1, 1))
    return fig


def show_thread_index(grid: int = 3, block: int = 64, n: int = 150):
    """Sliders for grid, block and N around :func:`draw_thread_map`; returns an ipywidgets VBox."""
    import ipywidgets as W

    s_grid = W.IntSlider(value=grid, min=1, max=16, description="grid (blocks)")
    s_block = W.IntSlider(value=block, min=1, max=MAX_THREADS_PER_BLOCK, description="block (threads)")
    s_n = W.IntSlider(value=n, min=0, max=4096, description="N")
    text, out = W.HTML(), W.Output()

    def redraw(_=None):
        tm = thread_map(s_grid.value, s_block.value, s_n.value)
        text.value = f"<code>{tm.summary()}</code>"
        style.show_in(out, draw_thread_map, tm)

    style.redraw_on((s_grid, s_block, s_n), redraw)
    return W.VBox([W.HBox([s_grid, s_block, s_n]), text, out])

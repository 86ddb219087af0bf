"""The thread-index widget: the index/warp/idle arithmetic and its drawing."""

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
from matplotlib.patches import Rectangle

from mgpu_helpers.widgets import thread_index as ti


def test_global_index_is_block_times_blockdim_plus_thread():
    tm = ti.thread_map(grid=3, block=4, n=10)
    assert tm.global_idx.tolist() == list(range(12))
    assert tm.block_idx.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert tm.thread_idx.tolist() == [0, 1, 2, 3] * 3
    k = 7  # thread 3 of block 1
    assert tm.global_idx[k] == tm.block_idx[k] * tm.block + tm.thread_idx[k] == 7


def test_bounds_check_idles_exactly_the_threads_past_n():
    tm = ti.thread_map(grid=4, block=256, n=1000)  # the seed's launch for N = 1000
    assert tm.total_threads == 1024 and tm.idle_threads == 24 and tm.active_threads == 1000
    assert not tm.active[1000:].any() and tm.active[:1000].all()
    assert tm.uncovered == 0


def test_grid_too_small_leaves_elements_without_a_thread():
    tm = ti.thread_map(grid=2, block=256, n=1000)
    assert tm.idle_threads == 0 and tm.uncovered == 488
    assert "NO thread" in tm.summary()


def test_warps_are_32_consecutive_threads_of_one_block():
    tm = ti.thread_map(grid=2, block=100, n=150)
    assert tm.warps_per_block == 4  # 100 threads still take 4 warps; the last has 4 threads
    assert tm.warp_in_block[:100].tolist() == [0] * 32 + [1] * 32 + [2] * 32 + [3] * 4
    assert tm.warp[100] == 4  # block 1 starts a new warp: warps never span blocks
    # threads 150..199 are idle: block 1, thread 50 onwards -> warp 1 of block 1 is split, warps 2 and 3 idle
    assert tm.warp_states() == {"full": 5, "split": 1, "idle": 2}


@pytest.mark.parametrize("grid,block,n", [(1, 1, 0), (3, 64, 150), (5, 33, 100), (8, 1024, 5000), (2, 7, 100)])
def test_counts_are_consistent(grid, block, n):
    tm = ti.thread_map(grid, block, n)
    assert tm.active_threads + tm.idle_threads == grid * block
    assert tm.active_threads == min(n, grid * block)
    assert sum(tm.warp_states().values()) == grid * tm.warps_per_block
    assert len(np.unique(tm.global_idx)) == grid * block


@pytest.mark.parametrize("grid,block,n", [(0, 32, 1), (1, 0, 1), (1, 1025, 1), (1, 32, -1)])
def test_rejects_impossible_launches(grid, block, n):
    with pytest.raises(ValueError):
        ti.thread_map(grid, block, n)


def test_drawing_shows_each_thread_its_state_and_the_split_warps():
    import matplotlib.pyplot as plt

    tm = ti.thread_map(grid=3, block=64, n=150)
    fig = ti.draw_thread_map(tm)
    ax = fig.axes[0]
    image = ax.images[0].get_array()
    np.testing.assert_array_equal(np.asarray(image), tm.active.reshape(3, 64).astype(int))
    labels = [t.get_text() for t in ax.texts]
    assert labels == [str(i) for i in range(192)]  # every thread's global index, in launch order
    outlines = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(outlines) == tm.warp_states()["split"] == 1  # warp 0 of block 2 (threads 128..159)
    assert outlines[0].get_xy() == (-0.5, 1.5)
    plt.close(fig)


def test_drawing_of_large_blocks_skips_labels_and_caps_rows():
    import matplotlib.pyplot as plt

    tm = ti.thread_map(grid=40, block=1024, n=30000)
    fig = ti.draw_thread_map(tm, max_blocks=8)
    ax = fig.axes[0]
    assert np.asarray(ax.images[0].get_array()).shape == (8, 1024)
    assert not [t for t in ax.texts if t.get_text().isdigit()]
    assert any("first 8 of 40 blocks" in t.get_text() for t in ax.texts)
    plt.close(fig)


def test_widget_redraws_when_a_slider_moves():
    w = ti.show_thread_index(grid=2, block=32, n=40)
    sliders = w.children[0].children
    text = w.children[1]
    assert "40 work, 24 idle" in text.value
    sliders[2].value = 64
    assert "64 work, 0 idle" in text.value

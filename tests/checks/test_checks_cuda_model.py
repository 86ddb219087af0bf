"""The checkers of notebook 01's fill-ins and of ex01 (mgpu_helpers.checks.cuda_model, and ex01's matrix and
grid-stride checkers in mgpu_helpers.checks.kernels): each rejects typical wrong answers with a message that
names the mistake, and accepts a correct answer written differently from the course's.

The kernels run in Numba's CUDA simulator on a machine without a GPU, on the GPU otherwise."""

import math
import time

import numpy as np
import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)  # before numba is imported: simulator on in CPU mode
from numba import cuda  # noqa: E402

from mgpu_helpers.checks import cuda_model as C  # noqa: E402
from mgpu_helpers.checks import kernels as K  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed  # noqa: E402
from mgpu_helpers.lessons import cuda_model as CM  # noqa: E402
from mgpu_helpers.measure import timing  # noqa: E402

SIMULATOR = timing.simulator()


def _fails(check, fn, *words):
    with pytest.raises(CheckFailed) as info:
        check(fn)
    text = str(info.value)
    assert all(w in text for w in words), text
    return text


# -- thread_ids -------------------------------------------------------------------------------------------


def _ids(grid, block, global_idx=None, warp=None, lane=None, block_idx=None):
    b = np.repeat(np.arange(grid), block)
    t = np.tile(np.arange(block), grid)
    g = b * block + t
    return (
        b if block_idx is None else block_idx(g, grid, block),
        t,
        g if global_idx is None else global_idx(b, t, grid),
        t // 32 if warp is None else warp(g),
        t % 32 if lane is None else lane(g),
    )


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda grid, block: _ids(grid, block, global_idx=lambda b, t, grid: b * grid + t), ("global_idx", "grid")),
        (lambda grid, block: _ids(grid, block, warp=lambda g: g // 32), ("warp", "从不跨 Block")),
        (lambda grid, block: _ids(grid, block, lane=lambda g: g % 32), ("lane", "块内编号")),
        (
            lambda grid, block: _ids(grid, block, block_idx=lambda g, grid, block: g // grid),
            ("block_idx", "不是除以 grid"),
        ),
        (lambda grid, block: _ids(grid, block)[:4], ("5 个数组",)),
    ],
    ids=["times-grid", "warp-across-blocks", "lane-from-global", "block-by-grid", "four-arrays"],
)
def test_thread_ids_wrong_answers_are_named(wrong, words):
    _fails(C.check_thread_ids, wrong, *words)


def test_thread_ids_written_with_divmod_passes(capsys):
    def thread_ids(grid, block, warp_size=32):
        g = np.arange(grid * block)
        b, t = np.divmod(g, block)
        w, lane = np.divmod(t, warp_size)
        return b, t, g, w, lane

    C.check_thread_ids(thread_ids)
    assert "通过" in capsys.readouterr().out


def test_the_course_s_own_thread_ids_does_not_count():
    _fails(C.check_thread_ids, CM.thread_ids, "课程自己的实现")


# -- work_and_idle ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda g, b, n: (min(n, g * b), g * b - n, max(0, n - g * b)), ("不会是负数",)),
        (lambda g, b, n: (n, max(0, g * b - n), max(0, n - g * b)), ("干活的线程最多",)),
        (lambda g, b, n: (min(n, g * b), max(0, g * b - n), 0), ("no_thread",)),
        (lambda g, b, n: [min(n, g * b), max(0, g * b - n)], ("三个整数",)),
    ],
    ids=["negative-idle", "work-is-n", "no-thread-missing", "two-values"],
)
def test_work_and_idle_wrong_answers_are_named(wrong, words):
    _fails(C.check_work_and_idle, wrong, *words)


def test_work_and_idle_written_with_branches_passes(capsys):
    def work_and_idle(grid, block, n):
        threads = grid * block
        if threads >= n:
            return n, threads - n, 0
        return threads, 0, n - threads

    C.check_work_and_idle(work_and_idle)
    assert "通过" in capsys.readouterr().out


# -- launch_config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda n, block=256: (n // block, block), ("向下取整",)),
        (lambda n, block=256: (n // block + 1, block), ("多开了一整块",)),
        (lambda n, block=256: ((n + block - 1) // block, block), ("n = 0", "1 个 Block")),
        (lambda n, block=256: (max(1, (n + 255) // 256), 256), ("block",)),
        (lambda n, block=256: max(1, (n + block - 1) // block), ("两个整数",)),
        (lambda n, block: (max(1, (n + block - 1) // block), block), ("默认值 256",)),
    ],
    ids=["floor", "plus-one", "zero-blocks", "ignores-block", "int-only", "no-default"],
)
def test_launch_config_wrong_answers_are_named(wrong, words):
    _fails(C.check_launch_config, wrong, *words)


def test_launch_config_written_with_ceil_passes(capsys):
    def launch_config(n, block=256):
        return max(math.ceil(n / block), 1), block

    C.check_launch_config(launch_config)
    assert "通过" in capsys.readouterr().out


def test_unwritten_launch_config_falls_back_to_the_course_s_one(capsys):
    def launch_config(n, block=256):
        raise NotImplementedError("练习：补全这里（约 1 行）")

    assert C.try_launch_config(launch_config) is CM.launch_config
    assert "还没写" in capsys.readouterr().out


# -- grid_2d ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrong,words",
    [
        (lambda rows, cols, bx, by: ((rows + bx - 1) // bx, (cols + by - 1) // by), ("弄反",)),
        (lambda rows, cols, bx, by: (max(1, cols // bx), max(1, rows // by)), ("向上取整",)),
        (lambda rows, cols, bx, by: ((cols + bx - 1) // bx, (rows + bx - 1) // bx), ("应当是",)),
        (lambda rows, cols, bx, by: [(cols + bx - 1) // bx, (rows + by - 1) // by], ("两个整数",)),
    ],
    ids=["swapped", "floor", "one-block-size", "list"],
)
def test_grid_2d_wrong_answers_are_named(wrong, words):
    _fails(C.check_grid_2d, wrong, *words)


def test_grid_2d_written_with_ceil_passes(capsys):
    C.check_grid_2d(lambda rows, cols, bx, by: (math.ceil(cols / bx), math.ceil(rows / by)))
    assert "通过" in capsys.readouterr().out


# -- reverse_copy -------------------------------------------------------------------------------------------


@cuda.jit
def rev_off_by_one(a, out, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[n - i]


@cuda.jit
def rev_array_length(a, out, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[a.size - 1 - i]


@cuda.jit
def rev_plain_copy(a, out, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[i]


@cuda.jit
def rev_no_bounds_check(a, out, n):
    i = cuda.grid(1)
    out[i] = a[n - 1 - i]


@cuda.jit
def rev_by_reading_side(a, out, n):
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if j < n:
        out[n - 1 - j] = a[j]  # each thread reads element j and writes it where it belongs


@pytest.mark.parametrize(
    "kernel,words",
    [
        (rev_off_by_one, ("差了一位",)),
        (rev_array_length, ("参数 n",)),
        (rev_plain_copy, ("没有倒过来",)),
        (rev_no_bounds_check, ("超出 n",)),
    ],
    ids=["off-by-one", "array-length", "plain-copy", "no-bounds-check"],
)
def test_reverse_copy_wrong_kernels_are_named(kernel, words):
    _fails(C.check_reverse_copy, kernel, *words)


def test_reverse_copy_indexed_by_the_source_passes(capsys):
    C.check_reverse_copy(rev_by_reading_side)
    assert "通过" in capsys.readouterr().out


# -- matrix_add (ex01, checks.kernels) ------------------------------------------------------------------------


@cuda.jit
def mat_no_col_check(a, b, c, rows, cols):
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < rows:
        c[row, col] = a[row, col] + b[row, col]


@cuda.jit
def mat_no_row_check(a, b, c, rows, cols):
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if col < cols:
        c[row, col] = a[row, col] + b[row, col]


@cuda.jit
def mat_swapped(a, b, c, rows, cols):
    row = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    col = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < rows and col < cols:
        c[row, col] = a[row, col] + b[row, col]


@cuda.jit
def mat_grid2(a, b, c, rows, cols):
    col, row = cuda.grid(2)
    if row >= rows or col >= cols:
        return
    c[row, col] = a[row, col] + b[row, col]


def test_matrix_add_without_a_column_check_is_caught_every_time():
    for _ in range(3):  # the widths are never multiples of 8, so this cannot pass by chance
        _fails(K.check_matrix_add, mat_no_col_check, "矩阵之外", "col < cols")


@pytest.mark.parametrize(
    "kernel,pattern",
    [(mat_no_row_check, "矩阵之外"), (mat_swapped, r"矩阵 \d+ 行 x \d+ 列.*第 \[\d+, \d+\] 个元素应当是.*弄反")],
    ids=["no-row-check", "swapped"],
)
def test_matrix_add_wrong_kernels_are_named(kernel, pattern):
    with pytest.raises(CheckFailed, match=pattern):
        K.check_matrix_add(kernel)


def test_matrix_add_with_grid2_and_early_return_passes(capsys):
    K.check_matrix_add(mat_grid2)
    assert "通过" in capsys.readouterr().out


# -- grid-stride: exactly once, and a loop that never ends -------------------------------------------------


@cuda.jit
def into_stride_blockdim(x, y, n):
    i = cuda.grid(1)
    while i < n:
        y[i] += x[i]
        i += cuda.blockDim.x


@cuda.jit
def into_stride_griddim(x, y, n):
    i = cuda.grid(1)
    while i < n:
        y[i] += x[i]
        i += cuda.gridDim.x


@cuda.jit
def into_stride_one(x, y, n):
    i = cuda.grid(1)
    while i < n:
        y[i] += x[i]
        i += 1


@cuda.jit
def into_thread_only(x, y, n):
    i = cuda.threadIdx.x
    while i < n:
        y[i] += x[i]
        i += cuda.gridsize(1)


@cuda.jit
def into_no_loop(x, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] += x[i]


@cuda.jit
def into_forgets_increment(x, y, n):
    i = cuda.grid(1)
    while i < n:
        y[i] += x[i]


@cuda.jit
def into_steps_by_zero(x, y, n):
    i = cuda.grid(1)
    step = 0
    while i < n:
        y[i] += x[i]
        i += step  # assigns i, so only the running watchdog can see it never ends


@cuda.jit
def into_for_range(x, y, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        y[i] += x[i]


@pytest.mark.parametrize(
    "kernel,words",
    [
        (into_stride_blockdim, ("不止一次",)),
        (into_stride_griddim, ("不止一次",)),
        (into_stride_one, ("不止一次",)),
        # thread-only: blocks share indices (twice) and skip others (never); on a GPU the blocks' unsynchronised
        # += can lose the double add, so which of the two is named first depends on the machine
        (into_thread_only, ("个元素不是恰好一次",)),
        (into_no_loop, ("一次也没有",)),
    ],
    ids=["stride-blockdim", "stride-griddim", "stride-one", "thread-only-index", "no-loop"],
)
def test_grid_stride_wrong_kernels_are_caught_by_counting_visits(kernel, words):
    _fails(C.check_add_into_grid_stride, kernel, *words)


def test_grid_stride_for_range_passes(capsys):
    C.check_add_into_grid_stride(into_for_range)
    assert "通过" in capsys.readouterr().out


def test_a_loop_without_its_increment_is_refused_before_it_runs():
    t0 = time.monotonic()
    text = _fails(C.check_add_into_grid_stride, into_forgets_increment, "永远不会结束", "while i < n")
    assert time.monotonic() - t0 < 5, text


@pytest.mark.skipif(not SIMULATOR, reason="the running watchdog exists in the simulator only (see checks.cuda_model)")
def test_a_loop_that_never_ends_is_stopped_within_seconds_and_the_session_goes_on(monkeypatch, capsys):
    monkeypatch.setattr(C, "WATCHDOG_S", 1.0)
    t0 = time.monotonic()
    text = _fails(C.check_add_into_grid_stride, into_steps_by_zero, "停不下来", "i = ")
    assert time.monotonic() - t0 < 10, text
    C.check_add_into_grid_stride(into_for_range)  # the next check runs normally
    assert "通过" in capsys.readouterr().out


# -- the learner's notebooks 00 and 01 show no scaffolding and leave the prediction empty ---------------------


@pytest.mark.parametrize("name", ["00_setup", "01_cuda_model", "ex01_cuda_kernels"])
def test_no_visible_cell_carries_an_assert_or_an_nbval_marker(name):
    import os

    import nbformat

    folder = "exercises" if name.startswith("ex") else "notebooks"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    nb = nbformat.read(os.path.join(root, folder, f"{name}.ipynb"), as_version=4)
    visible = [
        k
        for k, c in enumerate(nb.cells)
        if c.cell_type == "code"
        and ("assert" in c.source or "NBVAL" in c.source)
        and not c.metadata.get("jupyter", {}).get("source_hidden")
    ]
    assert not visible, f"{name}: cells {visible} show an assert or an nbval marker"
    assert not [k for k, c in enumerate(nb.cells) if c.cell_type == "markdown" and "测试" in c.source]


def test_the_learner_s_01_leaves_the_prediction_and_the_fill_ins_to_the_learner():
    import os

    import nbformat

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mgpu_helpers.tools import exercises

    text = "\n".join(
        c.source
        for c in nbformat.read(os.path.join(root, "notebooks", "01_cuda_model.ipynb"), as_version=4).cells
        if c.cell_type == "code"
    )
    assert "my_prediction = None" in text and "copy_over_kernel > 5" not in text  # a hidden test
    tested = "\n".join(
        c.source for c in exercises.tested_version(os.path.join(root, "solutions", "01_cuda_model.ipynb")).cells
    )
    assert tested.index("mh.widgets.predict.compare") < tested.index("copy_over_kernel > 5")
    assert text.count('raise NotImplementedError("练习：补全这里') == 3

"""The course's kernels, as exported from notebooks 01 and 02 (mgpu_helpers.lessons.cuda_model, .cupy_kernels),
the timing helpers (mgpu_helpers.measure.timing) and the kernels benchmark.

Runs the Numba kernels in the CUDA simulator on a machine without a GPU, on the GPU otherwise (same code). The
occupancy arithmetic is tested without numba in test_occupancy.py."""

import json
import subprocess
import sys

import numpy as np
import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)  # before numba is imported: simulator on in CPU mode
from numba import cuda  # noqa: E402

from mgpu_helpers.bench import kernels as bench  # noqa: E402
from mgpu_helpers.lessons import cuda_model as CM  # noqa: E402
from mgpu_helpers.lessons import cupy_kernels as CK  # noqa: E402
from mgpu_helpers.measure import timing  # noqa: E402

SIMULATOR = timing.simulator()
if not (SIMULATOR or cuda.is_available()):
    pytest.skip("numba was imported before setup() without the simulator, and there is no GPU", allow_module_level=True)

SIZES = [1, 31, 255, 256, 257, 1000, 2049]  # includes N not a multiple of the block


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed + n)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_seed_vec_add_with_explicit_copies_equals_numpy(n):
    a, b = _inputs(n)
    c, seconds = CM.vec_add_numba(a, b)
    np.testing.assert_array_equal(c, a + b)
    assert c.dtype == np.float32
    assert set(seconds) == {"alloc_s", "copy_in_s", "kernel_s", "copy_out_s", "numpy_s"}
    assert all(s >= 0 for s in seconds.values())


def test_seed_vec_add_with_explicit_copies_refuses_arrays_of_different_shapes():
    with pytest.raises(ValueError, match="one length"):
        CM.vec_add_numba(np.zeros(3, np.float32), np.zeros(4, np.float32))


@pytest.mark.parametrize("block", [32, 100, 256])
def test_seed_vec_add_any_block_leaves_no_element_and_writes_nothing_past_n(block):
    n = 777
    a, b = _inputs(n, seed=block)
    grid, _ = CM.launch_config(n, block)
    assert grid * block >= n > (grid - 1) * block
    # c is a view of a longer buffer: the bounds check must keep the idle threads off the padding.
    buf = cuda.to_device(np.full(grid * block, -1.0, np.float32))
    CM.vec_add[grid, block](cuda.to_device(a), cuda.to_device(b), buf[:n], n)
    out = buf.copy_to_host()
    np.testing.assert_array_equal(out[:n], a + b)
    assert (out[n:] == -1.0).all()


@pytest.mark.parametrize("n", [1, 3, 4, 7, 1000, 1024, 4093, 65537])  # none but 1024 a multiple of 4 x 256
def test_fast_vec_add_equals_numpy_for_n_not_a_multiple_of_the_tile(n):
    a, b = _inputs(n, seed=7)
    d_c = cuda.device_array(n, dtype=np.float32)
    grid = CK.vec_add_fast_launch(cuda.to_device(a), cuda.to_device(b), d_c)
    assert grid == -(-n // (4 * 256))
    np.testing.assert_array_equal(d_c.copy_to_host(), a + b)


@pytest.mark.parametrize("block", [32, 96, 128])
def test_fast_vec_add_any_block_fills_the_partial_last_tile_and_writes_nothing_past_n(block):
    n = 4 * block * 3 + block + 5  # three full tiles, then a tile with one full column and 5 more elements
    a, b = _inputs(n, seed=block)
    grid = CK.fast_launch_grid(n, block)
    assert grid == 4
    # c is a view of a longer buffer: the partial tile's checked path must keep off the padding.
    buf = cuda.to_device(np.full(grid * 4 * block, -1.0, np.float32))
    assert CK.vec_add_fast_launch(cuda.to_device(a), cuda.to_device(b), buf[:n], block=block) == grid
    out = buf.copy_to_host()
    np.testing.assert_array_equal(out[:n], a + b)
    assert (out[n:] == -1.0).all()


def test_fast_launch_computes_the_full_grid_and_refuses_one_too_small():
    assert CK.fast_launch_grid(2**28) == 2**28 // 1024 == 262144
    assert CK.fast_launch_grid(2**28, 128) == 2**19
    assert CK.fast_launch_grid(1) == CK.fast_launch_grid(0) == 1
    assert CK.fast_launch_grid(1024) == 1 and CK.fast_launch_grid(1025) == 2
    with pytest.raises(ValueError):
        CK.fast_launch_grid(10, 0)
    n = 1000
    a, b = _inputs(n)
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.device_array(n, np.float32)
    with pytest.raises(ValueError, match="needs 8 blocks"):  # 7 x 4 x 32 = 896 < 1000: elements left unwritten
        CK.vec_add_fast_launch(d_a, d_b, d_c, block=32, grid=7)
    assert CK.vec_add_fast_launch(d_a, d_b, d_c, block=32, grid=9) == 9  # a surplus block finds nothing to do
    np.testing.assert_array_equal(d_c.copy_to_host(), a + b)


@pytest.mark.parametrize("n", [1, 7, 1000, 4093])
def test_grid_stride_vec_add_with_its_one_wave_grid_equals_numpy(n):
    a, b = _inputs(n, seed=11)
    d_c = cuda.device_array(n, dtype=np.float32)
    grid = CK.vec_add_grid_stride_launch(cuda.to_device(a), cuda.to_device(b), d_c)
    assert grid == CK.one_wave_grid(CK.vec_add_grid_stride)
    np.testing.assert_array_equal(d_c.copy_to_host(), a + b)


@pytest.mark.parametrize("grid, block", [(1, 1), (2, 32), (3, 64)])
def test_grid_stride_vec_add_with_tiny_grid_still_covers_every_element(grid, block):
    n = 1000  # far more elements than threads: each thread walks the array in grid-sized strides
    a, b = _inputs(n, seed=3)
    d_c = cuda.device_array(n, dtype=np.float32)
    assert CK.vec_add_grid_stride_launch(cuda.to_device(a), cuda.to_device(b), d_c, block=block, grid=grid) == grid
    np.testing.assert_array_equal(d_c.copy_to_host(), a + b)


def test_cupy_fast_grid_has_a_thread_per_group_of_four_elements():
    assert CK.cupy_fast_grid(2**28) == 2**28 // 4 // 256
    assert CK.cupy_fast_grid(1024) == 1 and CK.cupy_fast_grid(1025) == 2  # 257 groups, the last of one element
    assert CK.cupy_fast_grid(1027, 128) == 3 and CK.cupy_fast_grid(0) == 1


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's own bounds checking")
def test_missing_bounds_check_raises_index_error_in_simulator():
    n = 100
    a, b = _inputs(n)
    with pytest.raises(IndexError):
        CM.vec_add_unchecked[1, 128](cuda.to_device(a), cuda.to_device(b), cuda.device_array(n, np.float32))


def test_launch_config_is_the_seeds_formula():
    assert CM.launch_config(1000) == (4, 256)
    assert CM.launch_config(1024) == (4, 256)
    assert CM.launch_config(1025) == (5, 256)
    assert CM.launch_config(2**28) == (2**20, 256)
    assert CM.launch_config(0) == (1, 256)
    with pytest.raises(ValueError):
        CM.launch_config(10, 0)


def test_bandwidth_counts_bytes_per_second():
    assert timing.bandwidth_gbps(3 * 10**9, 1.0) == pytest.approx(3.0)
    assert timing.bandwidth_gbps(3 * 2**28 * 4, 0.75e-3) == pytest.approx(3 * 2**30 / 0.75e-3 / 1e9)
    with pytest.raises(ValueError, match="positive"):
        timing.bandwidth_gbps(1, 0)


def test_time_gpu_returns_one_duration_in_seconds_per_repeat():
    n = 64
    a, b = _inputs(n)
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array(n, np.float32)
    times_s = timing.time_gpu(lambda: CM.vec_add[1, 64](da, db, dc, n), repeats=3, warmup=1)
    assert len(times_s) == 3 and all(0 < t < 60 for t in times_s)  # seconds, not milliseconds
    np.testing.assert_array_equal(dc.copy_to_host(), a + b)
    timing.synchronize()
    with pytest.raises(ValueError, match="'numba', 'cupy', 'torch'"):
        timing.time_gpu(lambda: None, repeats=1, library="opencl")
    with pytest.raises(ValueError, match="repeats >= 1"):
        timing.time_gpu(lambda: None, repeats=0)


def test_time_gpu_in_the_simulator_times_the_call_itself():
    if not SIMULATOR:
        pytest.skip("the simulator's wall-clock path")
    import time

    times_s = timing.time_gpu(lambda: time.sleep(0.02), repeats=2, warmup=0)
    assert all(t >= 0.02 for t in times_s)


@pytest.mark.skipif(ENV.cupy, reason="CPU-only behaviour")
def test_cupy_kernels_say_they_need_a_gpu_without_one():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed here (macOS: it needs CUDA)")
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    with pytest.raises(CUDARuntimeError):
        CK.vec_add_cupy_raw(cupy.zeros(4, dtype=np.float32), cupy.zeros(4, dtype=np.float32))


def test_cupy_kernel_sources_keep_the_seeds_kernel_and_name_what_cupy_looks_up():
    assert "C[i] = A[i] + B[i];" in CK.SEED_VEC_ADD_SRC and "if (i < N)" in CK.SEED_VEC_ADD_SRC
    for src, name in [
        (CK.SEED_VEC_ADD_SRC, "vecAdd"),
        (CK.FAST_VEC_ADD_SRC, "vecAddFast"),
        (CK.GRID_STRIDE_VEC_ADD_SRC, "vecAddGridStride"),
        (CK.MANY_REGS_SRC, "manyRegs"),
    ]:
        assert f" {name}(" in src and 'extern "C"' in src  # unmangled, so RawKernel(src, name) finds it


@pytest.mark.skipif(not ENV.cupy, reason="needs a GPU")
@pytest.mark.parametrize("n", [1, 5, 1000, 2**20 + 3])
def test_cupy_kernels_equal_numpy(n):
    import cupy as cp

    a, b = _inputs(n)
    ca, cb = cp.asarray(a), cp.asarray(b)
    for fn in (CK.vec_add_cupy_raw, CK.vec_add_cupy_elementwise, CK.vec_add_cupy_fast, CK.vec_add_cupy_grid_stride):
        np.testing.assert_array_equal(cp.asnumpy(fn(ca, cb)), a + b)
    # the N % 4 tail is written, and nothing past n
    buf = cp.full(n + 8, -1.0, dtype=cp.float32)
    CK.vec_add_cupy_fast(ca, cb, buf[:n])
    np.testing.assert_array_equal(cp.asnumpy(buf[:n]), a + b)
    assert bool((buf[n:] == -1.0).all())
    # a view that is not 16-byte aligned falls back instead of faulting
    if n > 2:
        for fn in (CK.vec_add_cupy_fast, CK.vec_add_cupy_grid_stride):
            np.testing.assert_array_equal(cp.asnumpy(fn(ca[1:], cb[1:])), a[1:] + b[1:])


def test_reference_table_names_every_recorded_kernel_with_its_share_of_torch_add():
    ref = bench.reference()
    assert "H200" in ref["source"]
    assert ref["gbps"]["torch_add"] == pytest.approx(4313.8)
    text = bench.format_table(bench.Table({}, ref["gbps"]))
    row = next(line for line in text.splitlines() if line.startswith("Numba vecAdd, block 256"))
    assert "3299.0" in row and "76%" in row  # 3299.0 / 4313.8
    assert len(text.splitlines()) == 2 + len(bench.ROWS)
    # the new kernels have no figure in that older recording: their rows show dashes, not zeros
    for label in (
        "Numba fast (4 per thread, full grid)",
        "CuPy fast (float4, full grid)",
        "Numba grid-stride (4 per trip, one wave)",
    ):
        row = next(line for line in text.splitlines() if line.startswith(label))
        assert row.split("|")[3].strip() == "-"


def test_fast_reference_quotes_each_kernel_against_its_own_runs_torch_add():
    ref = bench.fast_reference()
    assert "H200" in ref["source"] and "2026-12-01" in ref["source"]
    assert ref["torch_add"] == pytest.approx(4343.0)
    assert ref["gbps"] == {
        "numba_fast": 4275.0,
        "cupy_fast": 4362.0,
        "numba_grid_stride": 3572.0,
        "cupy_grid_stride": 4056.0,
    }
    assert ref["pct"]["numba_fast"] == 98.5 and ref["pct"]["cupy_fast"] == 100.4
    # the recorded percentages are the GB/s over that run's torch.add (rounding of the printed GB/s aside)
    for key, pct in ref["pct"].items():
        assert 100 * ref["gbps"][key] / ref["torch_add"] == pytest.approx(pct, abs=0.1)
    assert all(ref["pct"][k] >= 95 for k in ("numba_fast", "cupy_fast"))
    assert all(ref["pct"][k] < 95 for k in ("numba_grid_stride", "cupy_grid_stride"))
    text = bench.format_fast_reference(ref)
    assert "torch.add 4343 GB/s" in text
    row = next(line for line in text.splitlines() if "Numba fast (4 per thread, full grid)" in line)
    assert "4275 GB/s" in row and "98.5% of torch.add" in row
    assert len(text.splitlines()) == 1 + 4


def test_table_percentages_use_the_measured_torch_add():
    text = bench.format_table(bench.Table({"torch_add": 4000.0, "cupy_fast": 3880.0, "numba_grid_stride": 3400.0}, {}))
    lines = text.splitlines()
    assert "97%" in next(line for line in lines if line.startswith("CuPy fast (float4, full grid)"))
    assert "85%" in next(line for line in lines if line.startswith("Numba grid-stride (4 per trip, one wave)"))
    # every row has the same five columns, aligned under the header
    assert len({line.index("|") for line in lines if "|" in line}) == 1
    assert all(line.count("|") == 4 for line in lines if "|" in line)
    verdict = bench.fast_verdict(
        {"torch_add": 4000.0, "cupy_fast": 3900.0, "numba_fast": 3000.0, "numba_grid_stride": 2000.0}
    )
    assert len(verdict) == 2  # only the fast kernels are held to the target
    assert verdict[0].startswith("Numba fast (4 per thread, full grid): 75.0%") and "MISSES the 95%" in verdict[0]
    assert verdict[1].startswith("CuPy fast (float4, full grid): 97.5%") and "meets the 95%" in verdict[1]


@pytest.mark.skipif(ENV.mode == "gpu", reason="the no-GPU path")
def test_bench_without_gpu_prints_reference_and_exits_zero(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mgpu_helpers.bench",
            "kernels",
            "--smoke",
            "--n",
            "500",
            "--json",
            str(tmp_path / "k.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "needs an NVIDIA GPU" in out.stdout and "4313.8" in out.stdout
    assert "torch.add 4343 GB/s in the same run" in out.stdout  # the recorded fast / grid-stride figures
    assert "results equal NumPy" in out.stdout
    data = json.loads((tmp_path / "k.json").read_text())
    assert data["n"] == 500 and set(data["GBps"]) == {
        "numba_bs128",
        "numba_bs256",
        "numba_bs512",
        "numba_bs1024",
        "numba_grid_stride",
        "numba_fast",
    }


def test_whoami_kernel_agrees_with_the_thread_index_arithmetic():
    from mgpu_helpers.widgets import thread_index as ti

    grid, block = 3, 40
    ids = [cuda.device_array(grid * block, dtype=np.int32) for _ in range(5)]
    CM.whoami[grid, block](*ids)
    block_idx, thread_idx, global_idx, warp, lane = (d.copy_to_host() for d in ids)
    tm = ti.thread_map(grid, block, n=100)
    np.testing.assert_array_equal(global_idx, tm.global_idx)
    np.testing.assert_array_equal(block_idx, tm.block_idx)
    np.testing.assert_array_equal(thread_idx, tm.thread_idx)
    np.testing.assert_array_equal(warp, tm.warp_in_block)
    np.testing.assert_array_equal(lane, tm.thread_idx % 32)


@pytest.mark.parametrize("uniform", [False, True])
def test_branch_kernel_matches_its_numpy_reference(uniform):
    n, block, iters = 300, 64, 5
    x0 = np.linspace(0, 1, n, dtype=np.float32)
    d = cuda.to_device(x0)
    CM.branch_work[CM.launch_config(n, block)](d, iters, uniform)
    want = CM.branch_reference(x0, iters, uniform, block)
    np.testing.assert_allclose(d.copy_to_host(), want, rtol=1e-5)
    # the two groupings really send different threads down different paths
    assert not np.allclose(want, CM.branch_reference(x0, iters, not uniform, block))


def test_launch_checked_refuses_1025_threads_on_every_machine():
    d = cuda.to_device(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="1..1024"):
        CM.launch_checked(CM.vec_add, 1, 1025, d, d, d, 4)
    with pytest.raises(ValueError, match="至少要启动 1 个 Block"):
        CM.check_launch(0, 32)
    CM.launch_checked(CM.vec_add, 1, 32, d, d, d, 4)  # a good launch passes


@pytest.mark.parametrize("launch", [CK.vec_add_fast_launch, CK.vec_add_grid_stride_launch])
def test_fast_launch_rejects_arrays_of_different_lengths(launch):
    with pytest.raises(ValueError, match="differ"):
        launch(
            cuda.to_device(np.zeros(4, np.float32)),
            cuda.to_device(np.zeros(5, np.float32)),
            cuda.device_array(4, np.float32),
        )


def test_bandwidth_figure_has_one_bar_per_kernel_and_a_line_per_ceiling():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = bench.draw_bandwidth({"a": 1000.0, "b fast": 4000.0}, {"copy": 4200.0, "add": 4300.0})
    ax = fig.axes[0]
    assert len(ax.patches) == 2 and [p.get_width() for p in ax.patches] == [1000.0, 4000.0]
    assert len(ax.lines) == 2
    plt.close(fig)


def test_branch_reference_of_a_sample_equals_the_full_reference():
    x0 = np.linspace(0, 1, 600, dtype=np.float32)
    full = CM.branch_reference(x0, 6, False, 128)
    idx = np.array([0, 1, 127, 128, 129, 599])
    np.testing.assert_array_equal(CM.branch_reference(x0[idx], 6, False, 128, index=idx), full[idx])

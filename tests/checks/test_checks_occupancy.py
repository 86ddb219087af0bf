"""The checkers of notebook 02 and ex02 (mgpu_helpers.checks.occupancy) reject the typical wrong answers.

Each checker gets at least three named wrong answers, each rejected with a message that names the mistake, and
one correct answer written differently from the course's solution, which passes. Kernels are defined from source
text at module level of their own namespace (the simulator swaps the module-level ``cuda`` while they run)."""

from __future__ import annotations

import math
import textwrap
import time

import pytest
from learner_code import by_value

import mgpu_helpers as mh
from mgpu_helpers import checks
from mgpu_helpers.checks import occupancy as oc
from mgpu_helpers.models import occupancy as occ

ENV = mh.setup(show=False, prewarm=False)


def kernel(source: str):
    """A Numba kernel ``k`` from the text of its def, defined as a learner's cell defines it."""
    return by_value("from numba import cuda\n\n@cuda.jit\n" + textwrap.dedent(source), "k")


STUB = """
def f(*args):
    raise NotImplementedError("练习：补全这里（约 3 行）")
"""


# --------------------------------------------------------------------------------------------------------
# blocks_per_sm (02, fill-in 1)


def _blocks(round_regs=True, partitions=True, blocks_limit=True, whole_warps=True, big_check=True):
    def blocks_per_sm(block, regs_per_thread, limits):
        if big_check and block > limits.max_threads_per_block:
            return 0
        warps = -(-block // 32)
        by_threads = limits.max_threads_per_sm // 32 // warps if whole_warps else limits.max_threads_per_sm // block
        per_warp = -(-regs_per_thread * 32 // 256) * 256 if round_regs else regs_per_thread * 32
        if partitions:  # whole warps per quarter of the register file, times four
            by_regs = (limits.regs_per_sm // 4 // per_warp) * 4 // warps
        else:
            by_regs = limits.regs_per_sm // per_warp // warps
        return min([by_threads, by_regs] + ([limits.max_blocks_per_sm] if blocks_limit else []))

    return blocks_per_sm


@pytest.mark.parametrize(
    "wrong,named",
    [
        (_blocks(round_regs=False), "256"),
        (_blocks(partitions=False), "4 个分区"),
        (_blocks(blocks_limit=False), "max_blocks_per_sm"),
        (_blocks(whole_warps=False), "整 Warp"),
        (_blocks(big_check=False), "不能启动"),
    ],
    ids=["registers-not-rounded", "no-sub-partitions", "no-blocks-limit", "not-whole-warps", "1025-threads"],
)
def test_blocks_per_sm_names_the_mistake(wrong, named):
    with pytest.raises(checks.CheckFailed, match=named):
        checks.check_blocks_per_sm(wrong)


def test_blocks_per_sm_that_calls_the_model_is_refused():
    def lazy(block, regs_per_thread, limits):
        return mh.models.occupancy.occupancy(block, regs_per_thread, limits=limits).blocks_per_sm

    with pytest.raises(checks.CheckFailed, match="课程自己的实现"):
        checks.check_blocks_per_sm(lazy)
    with pytest.raises(checks.CheckFailed, match="课程自己的实现"):
        checks.check_blocks_per_sm(mh.lessons.cupy_kernels.blocks_per_sm)


def test_blocks_per_sm_returning_a_fraction_is_told_to_divide_whole():
    def floats(block, regs_per_thread, limits):
        return min(limits.max_threads_per_sm / block, limits.max_blocks_per_sm)

    with pytest.raises(checks.CheckFailed):
        checks.check_blocks_per_sm(floats)


def test_blocks_per_sm_written_differently_passes(capsys):
    def blocks_per_sm(block, regs_per_thread, limits):
        if block > limits.max_threads_per_block:
            return 0
        warps = math.ceil(block / limits.warp_size)
        words = math.ceil(regs_per_thread * limits.warp_size / limits.reg_alloc_unit) * limits.reg_alloc_unit
        fit = {
            "threads": limits.max_warps_per_sm // warps,
            "blocks": limits.max_blocks_per_sm,
            "registers": limits.sub_partitions * (limits.regs_per_sm // limits.sub_partitions // words) // warps,
        }
        return min(fit.values())

    checks.check_blocks_per_sm(blocks_per_sm)
    assert capsys.readouterr().out.startswith("通过：")


def test_try_blocks_per_sm_gives_the_reference_while_unwritten_and_the_learners_once_right(capsys):
    stub = by_value(STUB, "f")
    assert oc.try_blocks_per_sm(stub) is oc.reference_blocks_per_sm
    assert oc.try_blocks_per_sm(None) is oc.reference_blocks_per_sm
    assert "还没写" in capsys.readouterr().out
    right = _blocks()
    assert oc.try_blocks_per_sm(right) is right
    with pytest.raises(checks.CheckFailed):
        oc.try_blocks_per_sm(_blocks(round_regs=False))


# --------------------------------------------------------------------------------------------------------
# vec_add_two (02, fill-in 2): a Numba kernel in the simulator


TWO = {
    "overlapping-tiles": (
        """
        def k(a, b, c, n):
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            for j in (i, i + cuda.blockDim.x):
                if j < n:
                    c[j] = a[j] + b[j]
        """,
        "分片的起点是 blockIdx.x × 2 × blockDim.x",
    ),
    "no-block-index": (
        """
        def k(a, b, c, n):
            i = cuda.threadIdx.x
            for j in (i, i + cuda.blockDim.x):
                if j < n:
                    c[j] = a[j] + b[j]
        """,
        "blockIdx",
    ),
    "interleaved-2t-2t+1": (
        """
        def k(a, b, c, n):
            i = cuda.blockIdx.x * 2 * cuda.blockDim.x + 2 * cuda.threadIdx.x
            for j in (i, i + 1):
                if j < n:
                    c[j] = a[j] + b[j]
        """,
        "合并访问",
    ),
    "second-element-unchecked": (
        """
        def k(a, b, c, n):
            i = cuda.blockIdx.x * 2 * cuda.blockDim.x + cuda.threadIdx.x
            if i < n:
                c[i] = a[i] + b[i]
                c[i + cuda.blockDim.x] = a[i + cuda.blockDim.x] + b[i + cuda.blockDim.x]
        """,
        "下标|之外",
    ),
    "one-element-only": (
        """
        def k(a, b, c, n):
            i = cuda.blockIdx.x * 2 * cuda.blockDim.x + cuda.threadIdx.x
            if i < n:
                c[i] = a[i] + b[i]
        """,
        r"i \+ blockDim.x",
    ),
}


@pytest.mark.skipif(not ENV.numba_simulator, reason="counts writes through the CUDA simulator")
@pytest.mark.parametrize("name", list(TWO))
def test_vec_add_two_names_the_mistake(name):
    source, named = TWO[name]
    with pytest.raises(checks.CheckFailed, match=named):
        checks.check_vec_add_two(kernel(source))


@pytest.mark.skipif(not ENV.numba_simulator, reason="the simulator stops an endless thread; a GPU cannot")
def test_vec_add_two_that_never_ends_is_reported_within_seconds():
    endless = kernel(
        """
        def k(a, b, c, n):
            i = cuda.blockIdx.x * 2 * cuda.blockDim.x + cuda.threadIdx.x
            while i < n:
                c[i] = a[i] + b[i]
        """
    )
    t0 = time.monotonic()
    with pytest.raises(checks.CheckFailed, match="循环没有结束"):
        checks.check_vec_add_two(endless)
    assert time.monotonic() - t0 < 30


def test_vec_add_two_refuses_the_course_kernel_and_falls_back_for_the_stub(capsys):
    with pytest.raises(checks.CheckFailed, match="课程自己的"):
        checks.check_vec_add_two(mh.lessons.cupy_kernels.vec_add_two)
    stub = kernel(
        """
        def k(a, b, c, n):
            raise NotImplementedError("练习：补全这里（约 9 行）")
        """
    )
    assert oc.try_vec_add_two(stub) is mh.lessons.cupy_kernels.vec_add_two
    assert "还没写" in capsys.readouterr().out


def test_vec_add_two_written_differently_passes(capsys):
    right = kernel(
        """
        def k(a, b, c, n):
            start = 2 * cuda.blockDim.x * cuda.blockIdx.x
            for half in range(2):
                j = start + half * cuda.blockDim.x + cuda.threadIdx.x
                if j < n:
                    c[j] = a[j] + b[j]
        """
    )
    checks.check_vec_add_two(right)
    assert capsys.readouterr().out.startswith("通过：")


# --------------------------------------------------------------------------------------------------------
# saxpy_cupy (ex02-1): the structure everywhere, the run on a GPU


SAXPY_OK = '''
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    k = cp.RawKernel(r"""
    extern "C" __global__ void s(const float* x, float* y, float a, int n) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
            y[i] += a * x[i];
    }""", "s")
    k((max(1, -(-y.size // 128)),), (128,), (x, y, np.float32(alpha), np.int32(y.size)))
    return y
'''


@pytest.mark.parametrize(
    "source,named",
    [
        (
            """
def saxpy(alpha, x, y):
    y += alpha * x
    return y
""",
            "RawKernel",
        ),
        (
            """
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    k = cp.RawKernel("__global__ void s(float a, const float* x, float* y, int n) {"
                     " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }", "s")
    k(((y.size + 255) // 256,), (256,), (np.float32(alpha), x, y, np.int32(y.size)))
    return y
""",
            'extern "C"',
        ),
        (
            """
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    out = cp.empty_like(y)
    k = cp.RawKernel('extern "C" __global__ void s(float a, const float* x, const float* y, float* o, int n) {'
                     ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = a * x[i] + y[i]; }', "s")
    k(((y.size + 255) // 256,), (256,), (np.float32(alpha), x, y, out, np.int32(y.size)))
    return out
""",
            "原地",
        ),
        (
            """
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    k = cp.RawKernel('extern "C" __global__ void s(float a, const float* x, float* y, int n) {'
                     ' int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = a * x[i] + y[i]; }', "s")
    k(((y.size + 255) // 256,), (256,), (np.float32(alpha), x, y, np.int32(y.size)))
    return y
""",
            "边界检查",
        ),
    ],
    ids=["cupy-expression", "no-extern-C", "new-array", "no-bounds-check"],
)
def test_saxpy_structure_is_checked_without_a_gpu(source, named):
    with pytest.raises(checks.CheckFailed, match=named):
        checks.check_saxpy_cupy(by_value(source, "saxpy"))


def test_saxpy_written_differently_passes_or_says_it_skipped(capsys):
    checks.check_saxpy_cupy(by_value(SAXPY_OK, "saxpy"))
    out = capsys.readouterr().out
    assert out.startswith("通过：") if ENV.cupy else (out.startswith("跳过：") and "还没有被检查" in out)


@pytest.mark.skipif(not ENV.cupy, reason="needs a GPU: CuPy compiles and runs the learner's kernel")
@pytest.mark.parametrize(
    "source,named",
    [
        (
            """
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    out = y * 1
    k = cp.RawKernel('extern "C" __global__ void s(float a, const float* x, float* y, int n) {'
                     ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }', "s")
    k(((y.size + 255) // 256,), (256,), (np.float32(alpha), x, out, np.int32(y.size)))
    return out
""",
            "原地",
        ),
        (
            """
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    k = cp.RawKernel('extern "C" __global__ void s(float a, const float* x, float* y, int n) {'
                     ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }', "s")
    k(((y.size + 255) // 256,), (256,), (alpha, x, y, np.int32(y.size)))
    return y
""",
            "np.float32",
        ),
        (
            """
def saxpy(alpha, x, y):
    import cupy as cp
    import numpy as np
    k = cp.RawKernel('extern "C" __global__ void s(float a, const float* x, float* y, int n) {'
                     ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i <= n) y[i] = a * x[i] + y[i]; }', "s")
    k(((y.size + 255) // 256,), (256,), (np.float32(alpha), x, y, np.int32(y.size)))
    return y
""",
            "超出 n",
        ),
    ],
    ids=["returns-a-new-array", "python-float-alpha", "off-by-one-bounds"],
)
def test_saxpy_wrong_answers_on_a_gpu(source, named):
    with pytest.raises(checks.CheckFailed, match=named):
        checks.check_saxpy_cupy(by_value(source, "saxpy"))


# --------------------------------------------------------------------------------------------------------
# max_regs_per_thread (ex02-2)


def _max_regs(round_down=True, partitions=True, cap=True, limits_check=True):
    def max_regs_per_thread(block, k, lim):
        warps = -(-block // 32)
        if limits_check and (
            block > lim.max_threads_per_block or k > lim.max_blocks_per_sm or warps * k > lim.max_threads_per_sm // 32
        ):
            return 0
        if not round_down:
            r = lim.regs_per_sm // (block * k)
        else:
            per_warp = lim.regs_per_sm // 4 // -(-(warps * k) // 4) if partitions else lim.regs_per_sm // (warps * k)
            r = per_warp // 256 * 256 // 32
        return min(255, r) if cap else r

    return max_regs_per_thread


@pytest.mark.parametrize(
    "wrong,named",
    [
        (_max_regs(round_down=False), "256"),
        (_max_regs(partitions=False), "4 个分区"),
        (_max_regs(cap=False), "255"),
        (_max_regs(limits_check=False), "上限"),
    ],
    ids=["not-rounded", "no-sub-partitions", "no-255-cap", "no-limit-check"],
)
def test_max_regs_names_the_mistake(wrong, named):
    with pytest.raises(checks.CheckFailed, match=named):
        checks.check_max_regs(wrong)


def test_max_regs_by_searching_the_course_model_is_refused():
    def search(block, k, lim):
        return max([r for r in range(1, 256) if occ.occupancy(block, r, limits=lim).blocks_per_sm >= k], default=0)

    with pytest.raises(checks.CheckFailed, match="课程自己的实现"):
        checks.check_max_regs(search)


def test_max_regs_written_differently_passes(capsys):
    def own_blocks(block, regs, lim):
        if block > lim.max_threads_per_block:
            return 0
        warps = -(-block // 32)
        per_warp = -(-regs * 32 // 256) * 256
        return min(
            lim.max_threads_per_sm // 32 // warps,
            lim.max_blocks_per_sm,
            (lim.regs_per_sm // 4 // per_warp) * 4 // warps,
        )

    def max_regs_per_thread(block, k, lim):  # search with one's own arithmetic, from the top down
        for r in range(lim.max_regs_per_thread, 0, -1):
            if own_blocks(block, r, lim) >= k:
                return r
        return 0

    checks.check_max_regs(max_regs_per_thread)
    assert capsys.readouterr().out.startswith("通过：")


def test_max_regs_reference_gives_02s_launch_bounds_figure():
    regs = mh.measure.gpu_limits.recorded_registers()
    assert oc.reference_max_regs(1024, 1, occ.HOPPER) == regs["manyRegs_launch_bounds_1024"]["registers"] == 64


# --------------------------------------------------------------------------------------------------------
# one_wave_blocks (ex02-3)


@pytest.mark.parametrize(
    "wrong,named",
    [
        (lambda sm, regs, lim: sm, "SM 的个数"),
        (lambda sm, regs, lim: 8, "每个 SM 驻留的 Block 数"),
        (lambda sm, regs, lim: sm * lim.max_blocks_per_sm, "最多 32 个 Block"),
        (lambda sm, regs, lim: sm * lim.max_threads_per_sm, "线程数，不是 Block 数"),
    ],
    ids=["sm-count", "per-sm", "blocks-limit-times-sms", "threads-not-blocks"],
)
def test_one_wave_names_the_slip(wrong, named):
    if not ENV.numba_simulator and named == "每个 SM 驻留的 Block 数":
        pytest.skip("the per-SM count on a GPU depends on the compiled kernel")
    with pytest.raises(checks.CheckFailed, match=named):
        checks.check_one_wave_blocks(wrong)


def test_one_wave_from_the_course_model_is_refused():
    with pytest.raises(checks.CheckFailed, match="课程自己的实现"):
        checks.check_one_wave_blocks(lambda sm, regs, lim: mh.models.occupancy.one_wave_blocks(256, regs, limits=lim))


def test_one_wave_written_differently_passes(capsys):
    def one_wave_blocks(sm_count, regs_per_thread, limits):
        per_warp = math.ceil(regs_per_thread * 32 / 256) * 256
        return sm_count * min(
            limits.max_threads_per_sm // 256, limits.max_blocks_per_sm, 4 * (limits.regs_per_sm // 4 // per_warp) // 8
        )

    checks.check_one_wave_blocks(one_wave_blocks)
    assert capsys.readouterr().out.startswith("通过：")


def test_one_wave_facts_without_a_gpu_come_from_a_recorded_file():
    facts = checks.one_wave_facts()
    if ENV.numba_simulator:
        assert facts["sm_count"] == 132 and "ncu_h200.json" in facts["source"]
        assert facts["regs_per_thread"] == 32


@pytest.mark.parametrize("checker", ["check_blocks_per_sm", "check_max_regs", "check_one_wave_blocks"])
def test_an_answer_that_never_ends_is_stopped_within_seconds(checker):
    def endless(a, b, c):
        r = 0
        while r < 10:  # the increment is forgotten
            pass
        return r

    t0 = time.monotonic()
    with pytest.raises(checks.CheckFailed, match="循环没有结束"):
        getattr(checks, checker)(endless)
    assert time.monotonic() - t0 < 30
    assert checks.check_blocks_per_sm(_blocks()) is None  # and the session is still usable


def test_a_helper_of_the_learners_own_named_occupancy_is_not_mistaken_for_the_course(capsys):
    learner = by_value(
        """
        def occupancy(block, regs, lim):            # the learner's own helper, whatever its name
            warps = -(-block // 32)
            per_warp = -(-regs * 32 // 256) * 256
            return min(lim.max_threads_per_sm // 32 // warps, lim.max_blocks_per_sm,
                       (lim.regs_per_sm // 4 // per_warp) * 4 // warps)

        def blocks_per_sm(block, regs_per_thread, limits):
            return 0 if block > limits.max_threads_per_block else occupancy(block, regs_per_thread, limits)
        """,
        "blocks_per_sm",
    )
    checks.check_blocks_per_sm(learner)
    assert capsys.readouterr().out.startswith("通过：")


def test_the_course_function_imported_under_another_name_is_refused():
    ns = {"__name__": "learner_cell"}
    exec(
        "from mgpu_helpers.models.occupancy import occupancy as mine\n"
        "def blocks_per_sm(block, regs, limits):\n"
        "    return mine(block, regs, limits=limits).blocks_per_sm\n",
        ns,
    )
    with pytest.raises(checks.CheckFailed, match="课程自己的 mh.models.occupancy.occupancy（你的代码里叫 mine）"):
        checks.check_blocks_per_sm(ns["blocks_per_sm"])


# --------------------------------------------------------------------------------------------------------
# ex02's exercises: the usual wrong answers named.


def test_occupancy_without_rounding_registers_per_warp_names_the_case():
    def unrounded(block, regs_per_thread, limits):
        warps = -(-block // 32)
        if block > limits.max_threads_per_block:
            return 0
        by_regs = limits.regs_per_sm // (regs_per_thread * 32) // warps
        return min(limits.max_threads_per_sm // 32 // warps, limits.max_blocks_per_sm, by_regs)

    with pytest.raises(
        checks.CheckFailed, match=r"block = \d+，每线程 \d+ 个寄存器：应当是 \d+ 个 Block/SM.*取整后是 \d+ 个"
    ):
        checks.check_blocks_per_sm(unrounded)


def test_one_wave_given_as_the_sm_count_says_what_is_missing():
    with pytest.raises(checks.CheckFailed, match=r"一波应当是 \d+ 个 Block.*是 SM 的个数.*还要乘上它"):
        checks.check_one_wave_blocks(lambda sm_count, regs_per_thread, limits: sm_count)


def test_cupy_checker_fails_the_stub_without_running_it_even_without_a_gpu():
    stub = by_value(
        """
        def saxpy_cupy(alpha, x, y):
            raise NotImplementedError("练习：补全这里（约 3 行）")
        """,
        "saxpy_cupy",
    )
    with pytest.raises(checks.CheckFailed, match="这个练习还没有完成"):
        checks.check_saxpy_cupy(stub)


@pytest.mark.skipif(not ENV.cupy, reason="needs a GPU: CuPy runs the kernel")
def test_alpha_passed_as_a_python_float_is_explained():
    wrong = by_value(
        """
        def double_alpha(alpha, x, y):
            import cupy as cp, numpy as np
            src = 'extern "C" __global__ void s(float a, const float* x, float* y, int n) {' \\
                  ' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }'
            n = y.size
            cp.RawKernel(src, "s")(((n + 255) // 256,), (256,), (alpha, x, y, np.int32(n)))
            return y
        """,
        "double_alpha",
    )
    with pytest.raises(checks.CheckFailed, match="np.float32"):
        checks.check_saxpy_cupy(wrong)

"""Exercise checkers: run the reader's code on fresh random inputs, compare with a reference, explain.

Every ``check_xxx(fn)`` prints one ``通过：...`` line when ``fn`` is right, and otherwise raises
:class:`CheckFailed` (an ``AssertionError``) whose message says, in Chinese, what is wrong: which rank,
which element, what was expected and what came back. An exercise that is still the generated stub
(``raise NotImplementedError("练习：...")``) fails with a message that starts with
``这个练习还没有完成`` (:data:`NOT_DONE`), also when the stub raised inside a rank (``mh.RankError`` with
``exc_type == "NotImplementedError"``) or sits in a Numba kernel (which on a GPU cannot raise).

Exercises that involve ranks run the reader's function on several world sizes through
:func:`mgpu_helpers.run_ranks` (the function travels to the ranks by value); each rank builds its input
from the random values drawn here, so a failure names the rank and the element. Sizes are small: the
checks run in seconds on a CPU (Numba's simulator, gloo ranks) and unchanged on GPUs (NCCL ranks).

| notebook | checker | the reader writes |
| --- | --- | --- |
| ex01 | :func:`check_launch_shape` | ``launch_shape(n, block) -> (blocks, idle)`` |
| ex01 | :func:`check_vec_add` | a Numba kernel ``(a, b, c, n)``: global index + bounds check |
| ex01 | :func:`check_matrix_add` | a Numba kernel ``(a, b, c, rows, cols)``: 2D index + bounds check |
| ex01 | :func:`check_grid_stride_add` | a Numba kernel ``(a, b, c, n)``: grid-stride loop |
| ex04 | :func:`check_pass_right` | ``pass_right(rank, world_size, x)`` with ordered blocking send/recv |
| ex04 | :func:`check_ring_sum` | ``ring_sum(rank, world_size, x)``: the sum by passing round the ring |
| ex05 | :func:`check_broadcast` | ``broadcast_p2p(rank, world_size, x, src)`` from send/recv |
| ex05 | :func:`check_all_gather` | ``all_gather_p2p(rank, world_size, x)`` from send/recv |
| ex05 | :func:`check_ring_all_reduce` | ``ring_all_reduce(rank, world_size, x)``: reduce-scatter + all-gather ring |
| ex06 | :func:`check_shard_by_cost` | ``shard_by_cost(costs, rank, world_size)`` (property-tested) |
| ex06 | :func:`check_rank_memory` | ``rank_memory(strategy, n, params, grads, optimizer, activations)`` |
| ex07 | :func:`check_all_gather_uneven` | ``all_gather_uneven(rank, world_size, x)``: pieces of any length |
| ex07 | :func:`check_all_reduce_rs_ag` | ``all_reduce_rs_ag(rank, world_size, x)``: reduce-scatter + all-gather |
| ex08 | :func:`check_ring_allreduce_seconds` | the alpha-beta cost of a ring all-reduce |
| ex08 | :func:`check_rebalance` | ``rebalance(shards, seconds)``: new shards from measured times |
| ex09 | :func:`check_data_parallel_step` | ``data_parallel_step(model, optimizer, x, y, world_size)`` |
| ex10 | :func:`check_find_mismatch` | ``find_mismatch(evidence) -> (rank, seq, name)`` from a hang's evidence |
"""
from __future__ import annotations

import math
import random

import numpy as np

NOT_DONE = "这个练习还没有完成"
STUB_MARK = "练习：补全这里"
WORLD_SIZES = (2, 3, 4)


class CheckFailed(AssertionError):
    """A checker found something wrong; the message says what, in Chinese."""


# --------------------------------------------------------------------------------------------------------
# Shared machinery.


def _name(fn) -> str:
    inner = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn
    return getattr(inner, "__name__", repr(fn))


def _not_done(fn, what: str) -> CheckFailed:
    return CheckFailed(f"{NOT_DONE}：{what}。`{_name(fn)}` 里还是练习占位 raise NotImplementedError"
                       "（\"练习：补全这里\"）；在那里写下你的代码，再运行这个检查。")


def _is_stub_error(exc: BaseException) -> bool:
    if isinstance(exc, NotImplementedError):
        return True
    return getattr(exc, "exc_type", None) == "NotImplementedError"


def _has_stub(fn) -> bool:
    """True when ``fn`` (a function or a Numba kernel) still holds the generated stub's text."""
    inner = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn
    code = getattr(inner, "__code__", None)
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        for const in c.co_consts:
            if isinstance(const, str) and STUB_MARK in const:
                return True
            if hasattr(const, "co_consts"):
                stack.append(const)
    return False


def _passed(text: str) -> None:
    print(f"通过：{text}")


def _call(fn, what: str, *args):
    """``fn(*args)``, with the stub's NotImplementedError turned into the "not done yet" failure."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise _not_done(fn, what) from None


def _fmt(v) -> str:
    v = float(v)
    if math.isnan(v):
        return "NaN（没有写入）"
    return f"{v:g}"


def _compare(got, want, where: str, hint: str = "", atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Element by element; the first difference is named (index, expected, got)."""
    if got is None:
        raise CheckFailed(f"{where}：返回了 None。函数最后要 return 结果。")
    if isinstance(got, (list, tuple)) and got and not np.isscalar(got[0]):
        raise CheckFailed(f"{where}：返回了一个含 {len(got)} 个对象的列表；应当返回一个张量"
                          "（列表可以用 torch.cat 拼起来）。")
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise CheckFailed(f"{where}：结果的形状是 {got.shape}，应当是 {want.shape}。{hint}".rstrip())
    ok = np.isclose(got, want, atol=atol, rtol=rtol) & ~np.isnan(got)
    if not ok.all():
        bad = np.argwhere(~ok)
        k = tuple(int(i) for i in bad[0])
        idx = k[0] if len(k) == 1 else list(k)
        raise CheckFailed(f"{where}：第 {idx} 个元素应当是 {_fmt(want[k])}，实际是 {_fmt(got[k])}"
                          f"（共 {len(bad)} 个元素不对）。{hint}".rstrip())


# -- ranks --------------------------------------------------------------------------------------------------


def _forbidden(name: str):
    def refuse(*args, **kwargs):
        raise PermissionError(f"EXERCISE_FORBIDDEN dist.{name}")
    return refuse


def _rank_main(rank, world_size, fn, inputs, extra, forbid, dtype):
    """Rank function of the checkers: build this rank's tensor, call the reader's ``fn`` on it."""
    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device

    for name in forbid:                     # the exercise asks for point-to-point messages only
        if hasattr(dist, name):
            setattr(dist, name, _forbidden(name))
    x = torch.tensor(np.asarray(inputs[rank]), dtype=getattr(torch, dtype), device=rank_device())
    out = fn(rank, world_size, x, *extra)
    if isinstance(out, torch.Tensor):
        return out.detach().cpu().numpy()
    return out


def _run_ranks(fn, what: str, world_size: int, inputs, extra=(), forbid=(), dtype="float32", timeout=30.0):
    """Run ``fn(rank, world_size, x, *extra)`` on ``world_size`` ranks; returns the values in rank order."""
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks

    try:
        res = run_ranks(_rank_main, world_size, args=(fn, inputs, tuple(extra), tuple(forbid), dtype),
                        timeout=timeout, stream=False, quiet=True)
    except RankTimeout as exc:
        where = "; ".join(f"rank {r} 卡在 {w.split(' ')[0]}" for r, w in sorted(exc.waiting_in.items()))
        raise CheckFailed(
            f"{what}：{world_size} 个 Rank 过了 {timeout:g} 秒还没有结束，多半是死锁或者收发没有配对。"
            f"{where or '（没有 Rank 停在 torch.distributed 调用里）'}。"
            "检查：每个 send 在对方都有一个 recv 对应；阻塞的 send/recv 要错开顺序（或用 batch_isend_irecv）。"
        ) from None
    except RankError as exc:
        if _is_stub_error(exc):
            raise _not_done(fn, what) from None
        text = str(exc).splitlines()[0]
        if "EXERCISE_FORBIDDEN" in str(exc):
            name = str(exc).split("EXERCISE_FORBIDDEN ")[1].split()[0].rstrip("'\".,")
            raise CheckFailed(f"{what}：这个练习要求自己用点对点通信实现，不能直接调用 {name}"
                              f"（rank {exc.rank}）。") from None
        raise CheckFailed(f"{what}：rank {exc.rank} 出错了（{exc.exc_type}）：{text}") from None
    return res.values


def _int_values(rng, shape) -> np.ndarray:
    """Random small whole numbers as float32: sums are exact in any order, and messages stay readable."""
    return rng.integers(-50, 51, size=shape).astype(np.float32)


def _rng():
    return np.random.default_rng()


def _which_rank(got, inputs) -> str:
    """ ' (那是 rank k 的数据)' when ``got`` equals one rank's input, else ''."""
    for k, inp in enumerate(inputs):
        if got is not None and np.shape(got) == np.shape(inp) and np.allclose(got, inp):
            return f"（那正是 rank {k} 的输入）"
    return ""


# --------------------------------------------------------------------------------------------------------
# ex01: CUDA kernels in Numba (the simulator on a CPU, the GPU otherwise).


def check_launch_shape(fn) -> None:
    """``fn(n, block) -> (blocks, idle)``: blocks for ``n`` elements, and threads left without an element."""
    what = "launch_shape 要算出 Block 数和空闲线程数"
    rng = random.Random()
    cases = [(1, 256), (256, 256), (257, 256), (1000, 128)]
    cases += [(rng.randint(1, 10 ** 7), rng.choice([32, 64, 100, 128, 256, 512, 1024])) for _ in range(50)]
    for n, block in cases:
        got = _call(fn, what, n, block)
        blocks = (n + block - 1) // block
        want = (blocks, blocks * block - n)
        if not isinstance(got, tuple) or len(got) != 2:
            raise CheckFailed(f"n = {n}, block = {block}：应当返回 (blocks, idle) 两个整数，实际返回 {got!r}。")
        if tuple(int(v) for v in got) != want:
            hint = ""
            if got[0] == n // block and n % block:
                hint = f" 向下取整丢掉了最后 {n % block} 个元素：要向上取整，(n + block - 1) // block。"
            raise CheckFailed(f"n = {n}, block = {block}：应当是 {want[0]} 个 Block、{want[1]} 个空闲线程，"
                              f"实际得到 {tuple(got)}。{hint}".rstrip())
    _passed(f"launch_shape 在 {len(cases)} 组 (n, block) 上都对。")


PAD = 7   # extra elements after the data: a missing or off-by-one bounds check writes into them


def _kernel_stub(kernel, what):
    if _has_stub(kernel):
        raise _not_done(kernel, what)


def _launch(kernel, what, grid, block, *args):
    from numba import cuda

    try:
        kernel[grid, block](*args)
        cuda.synchronize()
    except NotImplementedError:
        raise _not_done(kernel, what) from None
    except Exception as exc:
        raise CheckFailed(f"{what}：Kernel 运行出错（{type(exc).__name__}：{str(exc).splitlines()[0]}）。") from None


def _check_1d(kernel, what, n, block, grid, hint_stride=False):
    from numba import cuda

    rng = _rng()
    a = _int_values(rng, n + PAD)
    b = _int_values(rng, n + PAD)
    c = np.full(n + PAD, np.nan, dtype=np.float32)
    d_a, d_b, d_c = cuda.to_device(a), cuda.to_device(b), cuda.to_device(c)
    _launch(kernel, what, grid, block, d_a, d_b, d_c, np.int32(n))
    got = d_c.copy_to_host()
    where = f"n = {n}，启动 [{grid}, {block}]"
    written_past = np.flatnonzero(~np.isnan(got[n:]))
    if written_past.size:
        k = n + int(written_past[0])
        raise CheckFailed(f"{where}：下标 {k} 已经超出 n（最后一个合法下标是 {n - 1}），却被写了。"
                          "边界检查应当是 i < n（不是 i <= n）。")
    hint = ""
    if hint_stride and np.isnan(got[grid * block:n]).any():
        hint = (f"只有前 {grid * block} 个元素被处理：每个线程要从 cuda.grid(1) 开始、"
                "每次加 cuda.gridsize(1)，一直循环到 n。")
    _compare(got[:n], a[:n] + b[:n], where, hint)


def check_vec_add(kernel) -> None:
    """The seed's vecAdd: ``kernel(a, b, c, n)`` with one thread per element and ``if i < n``."""
    what = "vecAdd Kernel 要算出全局下标并做边界检查"
    _kernel_stub(kernel, what)
    rng = random.Random()
    cases = [(rng.randint(1, 31), 32), (rng.randint(65, 250), 64), (rng.choice([128, 256]), 64)]
    for n, block in cases:
        _check_1d(kernel, what, n, block, (n + block - 1) // block)
    _passed(f"vecAdd 在 n = {', '.join(str(n) for n, _ in cases)} 上与 NumPy 一致，n 之后的元素没有被碰。")


def check_grid_stride_add(kernel) -> None:
    """Grid-stride vecAdd: ``kernel(a, b, c, n)`` is right whatever the grid, even one much smaller than n."""
    what = "grid-stride vecAdd 要让每个线程循环处理多个元素"
    _kernel_stub(kernel, what)
    rng = random.Random()
    cases = [(rng.randint(150, 400), 32, 2), (rng.randint(5, 40), 32, 2), (rng.randint(100, 300), 64, 1)]
    for n, block, grid in cases:
        _check_1d(kernel, what, n, block, grid, hint_stride=True)
    _passed("grid-stride vecAdd 在比线程数多和少的 n 上都与 NumPy 一致："
            + ", ".join(f"n = {n} 用 {g}x{b} 个线程" for n, b, g in cases) + "。")


def check_matrix_add(kernel) -> None:
    """2D vecAdd: ``kernel(a, b, c, rows, cols)`` launched on a 2D grid, x along columns, y along rows."""
    from numba import cuda

    what = "二维 Kernel 要从 (x, y) 算出 (row, col) 并对两个方向做边界检查"
    _kernel_stub(kernel, what)
    rng = _rng()
    shapes = [(int(rng.integers(3, 14)), int(rng.integers(15, 26))), (int(rng.integers(15, 24)), int(rng.integers(2, 9)))]
    for rows, cols in shapes:
        block = (8, 8)
        grid = ((cols + 7) // 8, (rows + 7) // 8)     # x covers the columns, y the rows
        a = _int_values(rng, (rows + 2, cols + 3))
        b = _int_values(rng, (rows + 2, cols + 3))
        c = np.full((rows + 2, cols + 3), np.nan, dtype=np.float32)
        d_c = cuda.to_device(c)
        _launch(kernel, what, grid, block, cuda.to_device(a), cuda.to_device(b), d_c, np.int32(rows), np.int32(cols))
        got = d_c.copy_to_host()
        where = f"矩阵 {rows} 行 x {cols} 列，grid {grid}，block {block}"
        inside = (np.arange(rows + 2)[:, None] < rows) & (np.arange(cols + 3)[None, :] < cols)
        outside = np.argwhere(~np.isnan(got) & ~inside)
        if outside.size:
            r, cc = (int(v) for v in outside[0])
            raise CheckFailed(f"{where}：元素 [{r}, {cc}] 在矩阵之外（合法范围 row < {rows}、col < {cols}），却被写了。"
                              "两个方向都要检查：row < rows 并且 col < cols。")
        missing = np.argwhere(np.isnan(got[:rows, :cols]))
        hint = ""
        if missing.size and rows != cols:
            hint = "有元素没被写：x 方向（blockIdx.x、threadIdx.x）对应列 col，y 方向对应行 row，别弄反。"
        _compare(got[:rows, :cols], a[:rows, :cols] + b[:rows, :cols], where, hint)
    _passed("二维 Kernel 在 " + "、".join(f"{r}x{c}" for r, c in shapes) + " 的矩阵上与 NumPy 一致，矩阵外没有被写。")


# --------------------------------------------------------------------------------------------------------
# ex04: point to point.


def check_pass_right(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` sends x to rank + 1 and returns what rank - 1 sent (a ring shift)."""
    what = "pass_right 要把 x 交给右边的 Rank，并返回从左边收到的张量"
    rng = _rng()
    for n in world_sizes:
        length = int(rng.integers(1, 6))
        inputs = [_int_values(rng, length) for _ in range(n)]
        got = _run_ranks(fn, what, n, inputs, timeout=timeout)
        for r in range(n):
            left = (r - 1) % n
            hint = _which_rank(got[r], inputs)
            _compare(got[r], inputs[left], f"world_size = {n}，rank {r} 应当收到左边 rank {left} 的数据",
                     hint + "右边是 (rank + 1) % world_size，左边是 (rank - 1) % world_size。" if hint else "")
    _passed(f"pass_right 在 world_size = {', '.join(map(str, world_sizes))} 上都把数据交给了右边，没有死锁。")


def check_ring_sum(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` returns the element-wise sum of every rank's x, passed round the ring."""
    what = "ring_sum 要沿环传递 world_size - 1 步，得到所有 Rank 的 x 之和"
    rng = _rng()
    for n in world_sizes:
        length = int(rng.integers(1, 5))
        inputs = [_int_values(rng, length) for _ in range(n)]
        got = _run_ranks(fn, what, n, inputs, forbid=("all_reduce", "reduce", "all_gather"), timeout=timeout)
        want = np.sum(inputs, axis=0)
        for r in range(n):
            hint = ""
            if got[r] is not None and np.shape(got[r]) == want.shape:
                for k in range(n):
                    partial = np.sum([inputs[(r - j) % n] for j in range(k)], axis=0) if k else None
                    if k and k < n and np.allclose(got[r], partial):
                        hint = f"只加了 {k} 个 Rank 的值：要传 world_size - 1 = {n - 1} 步，每一步把收到的加上。"
                        break
            _compare(got[r], want, f"world_size = {n}，rank {r}", hint)
    _passed(f"ring_sum 在 world_size = {', '.join(map(str, world_sizes))} 上每个 Rank 都得到了总和。")


# --------------------------------------------------------------------------------------------------------
# ex05: collectives from point-to-point messages.

P2P_ONLY = ("broadcast", "all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
            "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "gather", "scatter")


def check_broadcast(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x, src)`` returns rank ``src``'s x on every rank (send/recv only)."""
    what = "broadcast_p2p 要让每个 Rank 都拿到 src 的数据"
    rng = _rng()
    for n in world_sizes:
        src = int(rng.integers(0, n))
        length = int(rng.integers(1, 6))
        inputs = [_int_values(rng, length) for _ in range(n)]
        got = _run_ranks(fn, what, n, inputs, extra=(src,), forbid=P2P_ONLY, timeout=timeout)
        for r in range(n):
            hint = _which_rank(got[r], inputs)
            _compare(got[r], inputs[src], f"world_size = {n}，src = {src}，rank {r}", hint)
    _passed(f"broadcast_p2p 在 world_size = {', '.join(map(str, world_sizes))}、随机的 src 上都对。")


def check_all_gather(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)`` returns every rank's x concatenated in rank order (send/recv only)."""
    what = "all_gather_p2p 要把所有 Rank 的 x 按 rank 顺序拼起来"
    rng = _rng()
    for n in world_sizes:
        length = int(rng.integers(1, 4))
        inputs = [_int_values(rng, length) for _ in range(n)]
        want = np.concatenate(inputs)
        got = _run_ranks(fn, what, n, inputs, forbid=P2P_ONLY, timeout=timeout)
        for r in range(n):
            g = got[r]
            if g is not None and np.shape(g) == want.shape:
                for pos in range(n):
                    piece = np.asarray(g[pos * length:(pos + 1) * length])
                    if not np.allclose(piece, inputs[pos]):
                        src = _which_rank(piece, inputs)
                        raise CheckFailed(f"world_size = {n}，rank {r}：结果里第 {pos} 段（下标 {pos * length}.."
                                          f"{(pos + 1) * length - 1}）应当是 rank {pos} 的数据 {inputs[pos].tolist()}，"
                                          f"实际是 {piece.tolist()}{src}。按 rank 顺序放，不是按收到的顺序。")
            _compare(g, want, f"world_size = {n}，rank {r}")
    _passed(f"all_gather_p2p 在 world_size = {', '.join(map(str, world_sizes))} 上按 rank 顺序拼齐了。")


def check_ring_all_reduce(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: the ring all-reduce (sum) with isend/irecv; lengths need not divide."""
    what = "ring_all_reduce 要先做 Reduce-Scatter 再做 All-Gather，得到所有 Rank 的和"
    rng = _rng()
    for n in world_sizes:
        length = int(rng.integers(n, 3 * n + 5))     # chunks of uneven length, none empty
        inputs = [_int_values(rng, length) for _ in range(n)]
        want = np.sum(inputs, axis=0)
        got = _run_ranks(fn, what, n, inputs, forbid=P2P_ONLY, timeout=timeout)
        for r in range(n):
            _compare(got[r], want, f"world_size = {n}，长度 {length}，rank {r}",
                     "提示：块的边界用 collectives.chunk_bounds(len(x), world_size)，第 s 步发送块 (rank - s) % n。")
    _passed(f"ring_all_reduce 在 world_size = {', '.join(map(str, world_sizes))}、长度不能整除的张量上都等于总和。")


# --------------------------------------------------------------------------------------------------------
# ex06: sharding and memory.


def _shard_property(fn, costs, world_size) -> None:
    what = "shard_by_cost 要把每个下标恰好分给一个 Rank，并按成本均衡"
    where = f"costs = {costs}，world_size = {world_size}"
    owners: dict[int, int] = {}
    loads = []
    for rank in range(world_size):
        mine = _call(fn, what, list(costs), rank, world_size)
        again = _call(fn, what, list(costs), rank, world_size)
        if list(mine) != list(again):
            raise CheckFailed(f"{where}：rank {rank} 两次调用得到不同的结果 {list(mine)} 和 {list(again)}；"
                              "分片必须可重复（不要用随机数或进程私有的状态）。")
        for i in mine:
            if not (isinstance(i, (int, np.integer)) and 0 <= i < len(costs)):
                raise CheckFailed(f"{where}：rank {rank} 拿到了 {i!r}，它不是 0..{len(costs) - 1} 之间的下标。")
            if int(i) in owners:
                raise CheckFailed(f"{where}：下标 {int(i)} 同时分给了 rank {owners[int(i)]} 和 rank {rank}；"
                                  "每个下标只能属于一个 Rank。")
            owners[int(i)] = rank
        loads.append(sum(costs[int(i)] for i in mine))
    missing = sorted(set(range(len(costs))) - set(owners))
    if missing:
        raise CheckFailed(f"{where}：下标 {missing[0]} 没有分给任何 Rank（共漏掉 {len(missing)} 个）。")
    if costs:
        bound = sum(costs) / world_size + max(costs)
        worst = max(range(world_size), key=lambda r: loads[r])
        if loads[worst] > bound + 1e-9:
            raise CheckFailed(f"{where}：rank {worst} 的总成本 {loads[worst]:g} 超过了 平均 + 最大单项 = "
                              f"{bound:g}；各 Rank 的负载是 {loads}。试试：按成本从大到小，每次分给当前最轻的 Rank。")


def check_shard_by_cost(fn, examples: int = 150) -> None:
    """``fn(costs, rank, world_size) -> list of item indices``: reproducible, each index exactly once,
    ``max load <= total / world_size + max(costs)``. Property-tested on random inputs (hypothesis)."""
    what = "shard_by_cost 要把每个下标恰好分给一个 Rank，并按成本均衡"
    _call(fn, what, [3.0, 1.0, 2.0], 0, 2)     # a stub fails here, before the random search
    # Skewed cases first: sharding by count (round robin) passes many random inputs but none of these.
    for costs, ws in (([20, 0] * 3, 2), ([20, 1, 1, 1] * 3, 4), ([9, 9, 9, 1, 1, 1], 3)):
        _shard_property(fn, costs, ws)
    try:
        from hypothesis import HealthCheck, given, settings
        from hypothesis import strategies as st
    except ImportError:   # hypothesis is a test extra: fall back to plain random examples
        rng = random.Random()
        for _ in range(examples):
            costs = [rng.randint(0, 20) for _ in range(rng.randint(0, 25))]
            _shard_property(fn, costs, rng.randint(1, 6))
    else:
        prop = given(st.lists(st.integers(0, 20), max_size=25), st.integers(1, 6))(
            lambda costs, ws: _shard_property(fn, costs, ws))
        settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                 suppress_health_check=list(HealthCheck), print_blob=False)(prop)()
    _passed(f"shard_by_cost 在 {examples} 组随机成本上：可重复、每个下标恰好一次、最大负载 ≤ 平均 + 最大单项。")


MEMORY_STRATEGIES = ("replicate", "data_parallel", "zero1", "zero2", "zero3")


def check_rank_memory(fn) -> None:
    """``fn(strategy, n, params, grads, optimizer, activations) -> float``: memory of each rank (equal shares)."""
    from mgpu_helpers.models import perfmodel

    what = "rank_memory 要按策略算出每个 Rank 需要的显存"
    rng = random.Random()
    cases = [("replicate", 4, 6, 6, 12, 0)]       # the seed's 24 GB model on 4 GPUs: 24 GB on each
    cases += [(rng.choice(MEMORY_STRATEGIES), rng.randint(1, 8), *(rng.randint(0, 40) for _ in range(4)))
              for _ in range(60)]
    for strategy in MEMORY_STRATEGIES:
        cases.append((strategy, rng.randint(2, 8), *(rng.randint(1, 40) for _ in range(4))))
    for strategy, n, p, g, o, a in cases:
        got = _call(fn, what, strategy, n, p, g, o, a)
        want = perfmodel.memory_plan(strategy, n, math.inf, p, g, o, a).ranks[0].total
        if got is None or not math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-9):
            split = perfmodel.STRATEGIES[strategy]
            raise CheckFailed(f"{strategy}，n = {n}，params={p} grads={g} optimizer={o} activations={a}（GB）："
                              f"每个 Rank 应当是 {want:g} GB，实际得到 {got!r}。{strategy} 切分的部分："
                              f"{', '.join(split) or '没有（全部复制）'}，其余每个 Rank 都存一整份。")
    _passed(f"rank_memory 在 {len(cases)} 组（策略、GPU 数、各部分大小）上都对。")


# --------------------------------------------------------------------------------------------------------
# ex07: collective semantics.


def check_all_gather_uneven(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: x has a different length on each rank; return the concatenation in
    rank order on every rank."""
    what = "all_gather_uneven 要先交换长度、再收齐各 Rank 长度不同的片段，按 rank 顺序拼接"
    rng = _rng()
    for n in world_sizes:
        lengths = [int(v) for v in rng.integers(1, 6, size=n)]
        if len(set(lengths)) == 1:
            lengths[0] += 1
        inputs = [_int_values(rng, k) for k in lengths]
        want = np.concatenate(inputs)
        got = _run_ranks(fn, what, n, inputs, timeout=timeout)
        for r in range(n):
            hint = ""
            if got[r] is not None and np.size(got[r]) == n * max(lengths):
                hint = "长度等于 world_size x 最长片段：填充（padding）的部分要按每个 Rank 的真实长度截掉。"
            _compare(got[r], want, f"world_size = {n}，各 Rank 长度 {lengths}，rank {r}", hint)
    _passed(f"all_gather_uneven 在 world_size = {', '.join(map(str, world_sizes))}、各 Rank 长度不同的片段上都拼对了。")


def check_all_reduce_rs_ag(fn, world_sizes=WORLD_SIZES, timeout: float = 30.0) -> None:
    """``fn(rank, world_size, x)``: all-reduce (sum) as reduce-scatter then all-gather; len(x) % world_size == 0."""
    what = "all_reduce_rs_ag 要用 Reduce-Scatter + All-Gather 得到和 All-Reduce 一样的结果"
    rng = _rng()
    for n in world_sizes:
        length = n * int(rng.integers(1, 4))
        inputs = [_int_values(rng, length) for _ in range(n)]
        want = np.sum(inputs, axis=0)
        got = _run_ranks(fn, what, n, inputs, forbid=("all_reduce",), timeout=timeout)
        for r in range(n):
            hint = ""
            if got[r] is not None and np.size(got[r]) == length // n:
                hint = "这只是自己那一段（Reduce-Scatter 的结果）：再 All-Gather 一次拼回完整向量。"
            _compare(got[r], want, f"world_size = {n}，长度 {length}，rank {r}", hint)
    _passed(f"all_reduce_rs_ag 在 world_size = {', '.join(map(str, world_sizes))} 上与 All-Reduce 的结果相同。")


# --------------------------------------------------------------------------------------------------------
# ex08: the performance model and stragglers.


def check_ring_allreduce_seconds(fn) -> None:
    """``fn(nbytes, n, alpha, beta)``: ``2 (n - 1) alpha + 2 (n - 1) / n * nbytes * beta`` (0 for n = 1)."""
    from mgpu_helpers.models import perfmodel

    what = "ring_allreduce_seconds 要给出环形 All-Reduce 的 alpha-beta 代价"
    rng = random.Random()
    cases = [(1 << 30, 1, 5e-6, 1e-11), (1 << 30, 2, 5e-6, 1e-11), (1 << 20, 8, 5e-6, 1e-11)]
    cases += [(rng.randint(1, 1 << 32), rng.randint(1, 16), rng.uniform(1e-6, 5e-5), rng.uniform(1e-12, 1e-9))
              for _ in range(50)]
    for nbytes, n, alpha, beta in cases:
        got = _call(fn, what, nbytes, n, alpha, beta)
        want = perfmodel.ring_allreduce_seconds(nbytes, n, alpha, beta)
        if got is None or not math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-15):
            lat, bw = 2 * (n - 1) * alpha, 2 * (n - 1) / n * nbytes * beta
            raise CheckFailed(f"nbytes = {nbytes}，n = {n}，alpha = {alpha:.3g} s，beta = {beta:.3g} s/B："
                              f"应当是 {want:.6g} s（延迟项 {lat:.6g} + 带宽项 {bw:.6g}），实际得到 {got!r}。")
    _passed(f"ring_allreduce_seconds 在 {len(cases)} 组 (nbytes, n, alpha, beta) 上与模型一致。")


def best_rebalance(shards, seconds) -> list[int]:
    """Reference: whole units to ranks so that the slowest predicted rank is as fast as possible.

    Each rank's time per unit is ``seconds[r] / shards[r]``; units go one at a time to the rank that would
    finish it earliest (optimal for equal units on ranks of different speeds)."""
    per_unit = [s / k for s, k in zip(seconds, shards)]
    new = [0] * len(shards)
    for _ in range(int(sum(shards))):
        r = min(range(len(new)), key=lambda r: ((new[r] + 1) * per_unit[r], r))
        new[r] += 1
    return new


def check_rebalance(fn) -> None:
    """``fn(shards, seconds) -> new shards``: same total of whole units, slowest predicted rank as fast as
    the best whole-unit split (per-unit time of each rank = seconds / shards, as measured)."""
    what = "rebalance 要根据实测时间重新分配工作，让最慢的 Rank 尽量快"
    rng = random.Random()
    cases = [([12, 6, 4, 2], [0.12, 0.06, 0.04, 0.02])]    # equal speeds: 6/6/6/6
    for _ in range(40):
        n = rng.randint(2, 6)
        shards = [rng.randint(1, 20) for _ in range(n)]
        per_unit = [rng.choice([0.01, 0.01, 0.015, 0.02, 0.03]) for _ in range(n)]
        cases.append((shards, [k * u for k, u in zip(shards, per_unit)]))
    for shards, seconds in cases:
        got = _call(fn, what, list(shards), list(seconds))
        where = f"shards = {shards}，实测 {[round(s, 4) for s in seconds]} s"
        if got is None or len(got) != len(shards):
            raise CheckFailed(f"{where}：应当返回 {len(shards)} 个整数（每个 Rank 一个），实际得到 {got!r}。")
        if any(int(k) != k or k < 0 for k in got):
            raise CheckFailed(f"{where}：新的分片 {list(got)} 里有负数或小数；工作按整单位分配。")
        if sum(got) != sum(shards):
            raise CheckFailed(f"{where}：新的分片 {list(got)} 一共 {sum(got)} 个单位，应当还是 {sum(shards)} 个。")
        per_unit = [s / k for s, k in zip(seconds, shards)]
        times = [k * u for k, u in zip(got, per_unit)]
        best = best_rebalance(shards, seconds)
        best_max = max(k * u for k, u in zip(best, per_unit))
        worst = max(range(len(times)), key=lambda r: times[r])
        if times[worst] > best_max * (1 + 1e-9) + 1e-12:
            raise CheckFailed(f"{where}：按你的分片 {list(got)}，rank {worst} 预计要 {times[worst]:.4g} s；"
                              f"最好的整数分法 {best} 让最慢的 Rank 只要 {best_max:.4g} s。"
                              "每个 Rank 每单位的时间 = 实测时间 / 原来的单位数。")
    _passed(f"rebalance 在 {len(cases)} 组随机的分片和速度上，都让最慢的 Rank 和最优整数分法一样快。")


# --------------------------------------------------------------------------------------------------------
# ex09: a data-parallel training step.


def _dp_rank(rank, world_size, fn, config):
    import torch

    from mgpu_helpers.lessons import dataparallel as dp
    from mgpu_helpers.launcher.ranks import rank_device

    device = rank_device()
    x, y = dp.shard(dp.make_dataset(config), rank, world_size)
    model = dp.make_model(config, device)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.steps):
        fn(model, opt, x.to(device), y.to(device), world_size)
    return dp.flat_params(model).numpy()


def check_data_parallel_step(fn, world_sizes=(2, 3), timeout: float = 60.0) -> None:
    """``fn(model, optimizer, x, y, world_size)`` does one step on the local shard; after a few steps every
    rank's weights equal one process trained on the whole batch."""
    from mgpu_helpers.lessons import dataparallel as dp
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks

    what = "data_parallel_step 要做完 本地反向传播 → 梯度 All-Reduce 取平均 → optimizer.step()"
    rng = random.Random()
    for n in world_sizes:
        config = dp.TrainConfig(n_samples=12 * rng.randint(1, 3), steps=3, seed=rng.randint(0, 10 ** 6))
        try:
            res = run_ranks(_dp_rank, n, args=(fn, config), timeout=timeout, stream=False, quiet=True)
        except RankTimeout:
            raise CheckFailed(f"{what}：{n} 个 Rank 过了 {timeout:g} 秒还没结束；是不是有的 Rank 少调了一次 "
                              "All-Reduce？每个 Rank 每一步都要调用同样的 Collective。") from None
        except RankError as exc:
            if _is_stub_error(exc):
                raise _not_done(fn, what) from None
            raise CheckFailed(f"{what}：rank {exc.rank} 出错了（{exc.exc_type}）：{str(exc).splitlines()[0]}") from None
        want = dp.train_single_process(config).numpy()
        for r, got in enumerate(res.values):
            hint = ""
            if got is not None and np.shape(got) == want.shape and not np.allclose(got, want, atol=1e-9):
                hint = ("提示：All-Reduce 的 SUM 之后要除以 world_size（平均）；zero_grad 要在 backward 之前；"
                        "optimizer.step() 要在 All-Reduce 之后。")
            _compare(got, want, f"world_size = {n}，训练 {config.steps} 步后 rank {r} 的参数与单进程整批训练不同",
                     hint, atol=1e-9, rtol=1e-9)
    _passed(f"data_parallel_step 在 world_size = {', '.join(map(str, world_sizes))} 上训练几步后，"
            "每个 Rank 的参数都等于单进程整批训练。")


# --------------------------------------------------------------------------------------------------------
# ex10: reading the evidence of a hang.

COLLECTIVES = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "barrier")


def make_hang_evidence(world_size: int, completed: int, odd_rank: int, kind: str, majority_op: str,
                       odd_op: str | None = None):
    """A :class:`mgpu_helpers.RankTimeout` as the launcher would raise it after a hang, built by hand.

    Every rank's output holds :class:`mgpu_helpers.measure.diagnose.CollectiveLog` lines (``[seq k] enter/done
    NAME``) mixed with ordinary prints; ``stacks`` and ``waiting_in`` say where each rank was blocked.
    ``kind="mismatch"``: every rank finished collectives 0..completed-1, then ``odd_rank`` entered
    ``odd_op`` while the others entered ``majority_op`` (number ``completed``). ``kind="late"``:
    ``odd_rank`` finished only up to ``completed - 2`` and never reached collective ``completed - 1``
    (it is still computing), where the others wait in ``majority_op``.
    """
    from mgpu_helpers.launcher.errors import RankTimeout

    finished = completed - 1 if kind == "late" else completed     # collectives every rank completed
    history = [("all_reduce", "broadcast")[k % 2] for k in range(finished)]
    outputs, stacks, waiting = {}, {}, {}
    for r in range(world_size):
        lines = [f"rank {r} ready, world_size {world_size}"]
        for k, op in enumerate(history):
            lines += [f"[seq {k}] enter {op}", f"step {k}: loss {1.0 / (k + 2):.4f}", f"[seq {k}] done {op}"]
        if kind == "late" and r == odd_rank:
            outputs[r] = lines + [f"step {finished}: loading a slow batch"]
            stacks[r] = ('Current thread 0x00007f (most recent call first):\n'
                         '  File "train.py", line 31 in load_batch\n  File "train.py", line 52 in step\n'
                         '  File "mgpu_helpers/launcher/rank.py", line 88 in main')
            continue
        op = odd_op if (kind == "mismatch" and r == odd_rank) else majority_op
        outputs[r] = lines + [f"[seq {finished}] enter {op}"]
        waiting[r] = f"dist.{op} (called from call, line 45)"
        stacks[r] = ('Current thread 0x00007f (most recent call first):\n'
                     f'  File "torch/distributed/distributed_c10d.py", line 2800 in {op}\n'
                     '  File "mgpu_helpers/measure/diagnose.py", line 45 in call\n'
                     '  File "train.py", line 60 in step\n  File "mgpu_helpers/launcher/rank.py", line 88 in main')
    msg = f"{world_size} of {world_size} rank(s) were still running after 5 s and have been ended."
    return RankTimeout(msg, stacks=stacks, waiting_in=waiting, rank=0, outputs=outputs)


def check_find_mismatch(fn) -> None:
    """``fn(evidence) -> (rank, seq, name)``: the rank to look at first in a hang's evidence, the number of
    the collective where it parted from the others, and the collective it is in (None when in none)."""
    what = "find_mismatch 要从挂起的证据里找出和别人不一样的 Rank"
    rng = random.Random()
    cases = []
    for _ in range(12):
        n = rng.randint(3, 6)
        kind = rng.choice(["mismatch", "late"])
        completed = rng.randint(2, 9)
        odd = rng.randrange(n)
        major = rng.choice(COLLECTIVES[:4])
        other = rng.choice([c for c in COLLECTIVES[:4] if c != major])
        cases.append((n, completed, odd, kind, major, other))
    for n, completed, odd, kind, major, other in cases:
        ev = make_hang_evidence(n, completed, odd, kind, major, other)
        got = _call(fn, what, ev)
        want = (odd, completed, other) if kind == "mismatch" else (odd, completed - 1, None)
        if got is None or len(tuple(got)) != 3:
            raise CheckFailed(f"应当返回 (rank, seq, name) 三个值，实际得到 {got!r}。")
        got = tuple(got)
        if got != want:
            others = [r for r in range(n) if r != odd]
            if kind == "mismatch":
                story = (f"rank {', '.join(map(str, others))} 都停在 #{completed} {major}，"
                         f"只有 rank {odd} 停在 #{completed} {other}")
            else:
                story = (f"rank {', '.join(map(str, others))} 都停在 #{completed - 1} {major}，"
                         f"rank {odd} 最后完成的是 #{completed - 2}，根本没有进入 #{completed - 1}（它不在任何 Collective 里）")
            raise CheckFailed(f"{n} 个 Rank 的证据：{story}。应当回答 {want}，你的回答是 {got}。"
                              "看每个 Rank 输出里最后的 [seq k] enter/done 行，找和多数不一样的那个。")
    _passed(f"find_mismatch 在 {len(cases)} 份随机的挂起证据（调用不一致、某个 Rank 没到）上都找对了。")

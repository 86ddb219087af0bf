"""The checkers' shared machinery: the failure type, comparing with a reference, running code on ranks."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

NOT_DONE = "这个练习还没有完成"
STUB_MARK = "练习：补全这里"
WORLD_SIZES = (2, 3, 4)


class CheckFailed(AssertionError):
    """A checker found something wrong; the message says what, in Chinese."""


# --------------------------------------------------------------------------------------------------------
# Shared machinery.


def name_of(fn) -> str:
    inner = getattr(fn, "py_func", None) or getattr(fn, "fn", None) or fn
    return getattr(inner, "__name__", repr(fn))


def not_done(fn, what: str) -> CheckFailed:
    return CheckFailed(f"{NOT_DONE}：{what}。`{name_of(fn)}` 里还是练习占位 raise NotImplementedError"
                       "（\"练习：补全这里\"）；在那里写下你的代码，再运行这个检查。")


def is_stub_error(exc: BaseException) -> bool:
    if isinstance(exc, NotImplementedError):
        return True
    return getattr(exc, "exc_type", None) == "NotImplementedError"


def has_stub(fn) -> bool:
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


def fill_in(fn, check, reference, what: str):
    """A lesson's fill-in, checked at once: what the cells after it should use.

    ``check(fn)`` runs the area's checker (it prints ``通过：...`` or raises :class:`CheckFailed` naming the
    mistake). While ``fn`` is still the generated stub (or ``None``), nothing is checked: this says so and
    returns ``reference``, the course's own version, so the rest of the notebook runs either way. A wrong
    ``fn`` raises: the cell stops at the mistake, and the cells after it keep the last good value.
    """
    if fn is None or has_stub(fn):
        print(f"「{what}」还没写：下面的单元格先用课程的参考实现。写好之后再运行这一格，它会立刻检查你的版本。")
        return reference
    try:
        check(fn)
    except CheckFailed as exc:
        if str(exc).startswith(NOT_DONE):       # the stub was reached deeper down (a helper still unwritten)
            print(f"「{what}」还没写完：{str(exc)[len(NOT_DONE) + 1:]} 下面的单元格先用课程的参考实现。")
            return reference
        raise
    return fn


def passed(text: str) -> None:
    print(f"通过：{text}")


def call(fn, what: str, *args):
    """``fn(*args)``, with the stub's NotImplementedError turned into the "not done yet" failure."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise not_done(fn, what) from None


def is_number(v) -> bool:
    """A real number the learner returned: int or float, not a bool, not NaN."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def fmt(v) -> str:
    v = float(v)
    if math.isnan(v):
        return "NaN（没有写入）"
    return f"{v:g}"


def compare(got, want, where: str, hint: str = "", atol: float = 1e-5, rtol: float = 1e-5) -> None:
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
        raise CheckFailed(f"{where}：第 {idx} 个元素应当是 {fmt(want[k])}，实际是 {fmt(got[k])}"
                          f"（共 {len(bad)} 个元素不对）。{hint}".rstrip())


# -- ranks --------------------------------------------------------------------------------------------------


def _forbidden(name: str):
    def refuse(*args, **kwargs):
        raise PermissionError(f"EXERCISE_FORBIDDEN dist.{name}")
    return refuse


def _rank_main(rank, world_size, fn, inputs, extra, forbid, dtype, joined=True):
    """Rank function of the checkers: build this rank's tensor, call the reader's ``fn`` on it.

    ``joined=False``: the reader's ``fn`` joins the process group itself and must leave it before returning.
    """
    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device

    for name in forbid:                     # the exercise asks for point-to-point messages only
        if hasattr(dist, name):
            setattr(dist, name, _forbidden(name))
    x = torch.tensor(np.asarray(inputs[rank]), dtype=getattr(torch, dtype), device=rank_device())
    out = fn(rank, world_size, x, *extra)
    if not joined and dist.is_initialized():
        raise RuntimeError("EXERCISE_NOT_LEFT the process group is still up when fn returned")
    if isinstance(out, torch.Tensor):
        return out.detach().cpu().numpy()
    return out


def run_on_ranks(fn, what: str, world_size: int, inputs, extra=(), forbid=(), dtype="float32", timeout=30.0,
                 init: bool = True):
    """Run ``fn(rank, world_size, x, *extra)`` on ``world_size`` ranks; returns the values in rank order.

    ``init=False``: the ranks start without a process group; ``fn`` joins it (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT and MGPU_BACKEND are set) and must leave it again.
    """
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks

    try:
        res = run_ranks(_rank_main, world_size, args=(fn, inputs, tuple(extra), tuple(forbid), dtype, init),
                        timeout=timeout, stream=False, quiet=True, init=init)
    except RankTimeout as exc:
        where = "; ".join(f"rank {r} 卡在 {w.split(' ')[0]}" for r, w in sorted(exc.waiting_in.items()))
        raise CheckFailed(
            f"{what}：{world_size} 个 Rank 过了 {timeout:g} 秒还没有结束，多半是死锁或者收发没有配对。"
            f"{where or '（没有 Rank 停在 torch.distributed 调用里）'}。"
            "检查：每个 send 在对方都有一个 recv 对应；阻塞的 send/recv 要错开顺序（或用 batch_isend_irecv）。"
        ) from None
    except RankError as exc:
        raise rank_failure(exc, fn, what) from None
    return res.values


def rank_failure(exc, fn, what: str) -> CheckFailed:
    """The learner-facing failure for a :class:`~mgpu_helpers.RankError` raised by the learner's ``fn``:
    "not done yet" for the stub, the exercise's own rules (forbidden calls, a group left open), else the
    rank, the exception type and its first line."""
    if is_stub_error(exc):
        return not_done(fn, what)
    text = str(exc).splitlines()[0]
    if "EXERCISE_NOT_LEFT" in str(exc):
        return CheckFailed(f"{what}：rank {exc.rank} 返回时进程组还开着。最后要调用 "
                           "dist.destroy_process_group()，让这个进程离开进程组。")
    if "EXERCISE_FORBIDDEN" in str(exc):
        name = str(exc).split("EXERCISE_FORBIDDEN ")[1].split()[0].rstrip("'\".,")
        return CheckFailed(f"{what}：这个练习要求自己用点对点通信实现，不能直接调用 {name}（rank {exc.rank}）。")
    return CheckFailed(f"{what}：rank {exc.rank} 出错了（{exc.exc_type}）：{text}")


def int_values(rng, shape) -> np.ndarray:
    """Random small whole numbers as float32: sums are exact in any order, and messages stay readable."""
    return rng.integers(-50, 51, size=shape).astype(np.float32)


def new_rng():
    return np.random.default_rng()


def which_rank(got, inputs) -> str:
    """ ' (那是 rank k 的数据)' when ``got`` equals one rank's input, else ''."""
    for k, inp in enumerate(inputs):
        if got is not None and np.shape(got) == np.shape(inp) and np.allclose(got, inp):
            return f"（那正是 rank {k} 的输入）"
    return ""


# -- one problem shape for the checkers that launch ranks ----------------------------------------------------


@dataclass(frozen=True)
class RankCase:
    """One drawn case of a :class:`RankProblem`: the inputs of every rank and what each rank must return."""
    world_size: int
    inputs: list
    extra: tuple
    expected: list


@dataclass(frozen=True)
class RankProblem:
    """An exercise that runs the reader's ``fn(rank, world_size, x, *extra)`` on ranks (one row of a table).

    - ``name``: the reader's function, as the messages call it; ``what``: what it must do (one sentence);
    - ``make_case(rng, world_size) -> (inputs, extra)``: fresh random inputs, one per rank, and extra args;
    - ``reference(inputs, extra, world_size) -> [expected value of each rank]``;
    - ``explain(case, rank, got) -> str``: a hint for a wrong answer ('' for none); it may also raise
      :class:`CheckFailed` itself for a more precise message;
    - ``where(case, rank) -> str``: how a failure names the case (default: world size and rank);
    - ``forbid``: ``torch.distributed`` names the reader may not call; ``init=False``: ``fn`` joins and leaves
      the process group itself; ``world_sizes``: the sizes run by default; ``done``: the pass line, with
      ``{sizes}`` for the world sizes run.
    """
    name: str
    what: str
    make_case: Callable
    reference: Callable
    done: str
    explain: Callable | None = None
    where: Callable | None = None
    forbid: tuple = ()
    init: bool = True
    world_sizes: tuple = WORLD_SIZES
    dtype: str = "float32"


def default_where(case: RankCase, rank: int) -> str:
    return f"world_size = {case.world_size}，rank {rank}"


def run_problem(problem: RankProblem, fn, world_sizes=None, timeout: float = 30.0) -> list[RankCase]:
    """Run ``fn`` on every world size of ``problem``, compare each rank with the reference, explain a miss.

    Prints the pass line and returns the cases run; raises :class:`CheckFailed` naming the world size, the
    rank and the element at the first difference.
    """
    rng = new_rng()
    sizes = tuple(world_sizes or problem.world_sizes)
    if not sizes or any(int(w) != w or w < 1 for w in sizes):
        raise ValueError(f"world_sizes must be whole numbers >= 1, got {world_sizes!r}")
    where = problem.where or default_where
    cases = []
    for world_size in sizes:
        inputs, extra = problem.make_case(rng, world_size)
        case = RankCase(world_size, inputs, tuple(extra), problem.reference(inputs, tuple(extra), world_size))
        got = run_on_ranks(fn, problem.what, world_size, inputs, case.extra, problem.forbid, problem.dtype,
                           timeout, init=problem.init)
        for rank in range(world_size):
            hint = problem.explain(case, rank, got[rank]) if problem.explain else ""
            compare(got[rank], case.expected[rank], where(case, rank), hint)
        cases.append(case)
    passed(problem.done.format(sizes=", ".join(map(str, sizes))))
    return cases

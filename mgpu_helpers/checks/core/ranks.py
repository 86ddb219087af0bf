"""Launching a checker's work on ranks (:func:`mgpu_helpers.run_ranks`), the learner's calls watched; a hang or an
error is told in the learner's terms: where each rank waits, or which rank broke which rule."""

import numpy as np

from .course_code import refuse_course_code, resolve_course
from .failure import CheckFailed, is_stub_error, not_done
from .watch import WatchedCalls

# How long the checked work may run once every rank has joined the process group. On the shared 2-core course
# machine a whole checker launch (forking, joining, the work, the result back) takes 0.7-1.0 s on 2-4 ranks: 4 s is
# several times that, and an endless answer is reported within seconds (tests/checks/test_core_ranks.py holds to it).
HANG_S = 4.0
# Checkers whose ranks train a model (an optimizer's first step imports torch._dynamo): twice the limit.
TRAIN_HANG_S = 2 * HANG_S


def where_ranks_wait(exc) -> str:
    """'rank 0 卡在 dist.send（exchange 的第 12 行）；rank 1 ...' from a :class:`RankTimeout`'s stacks: per rank,
    the torch.distributed call it is blocked in and the line of the learner's code that made it."""
    from mgpu_helpers.launcher.supervise import read_stack

    parts = []
    for rank in sorted(set(exc.stacks) | set(exc.waiting_in)):
        call_ = (exc.waiting_in.get(rank) or "").split(" ")[0]
        where = ""
        waiting = read_stack(exc.stacks.get(rank, ""))
        if waiting is not None:
            call_ = call_ or waiting.dist_call()
            mine = waiting.code_frames(skip=("mgpu_helpers/",))  # the learner's frames, innermost first
            where = f"（{mine[0][2]} 的第 {mine[0][1]} 行）" if mine else ""
            inside = waiting.frames[: waiting.frames.index(mine[0])] if mine else waiting.frames
            if not call_ and any("mgpu_helpers/checks/" in path for path, _line, _func in inside):
                # Blocked in a request's wait(): a C++ call, so no torch.distributed frame on the stack.
                call_ = "request.wait()（等返回的请求完成）"
        parts.append(f"rank {rank} 卡在 {call_ or '（不在 torch.distributed 调用里，像是死循环）'}{where}")
    return "；".join(parts)


def hang_failure(exc, what: str, world_size: int, timeout: float, advice: str = "") -> CheckFailed:
    """The learner-facing failure for a :class:`RankTimeout`: how long, where each rank waits, what to check."""
    advice = advice or (
        "检查：每个 send 在对方都有一个 recv 对应（对方是不是那个 rank，长度是否一样）；"
        "如果每个 Rank 都先做同一件事（都先 send，或者都先 recv），等待就会连成一个圈。"
    )
    return CheckFailed(
        f"{what}：{world_size} 个 Rank 过了 {timeout:g} 秒还没有结束——死锁了，或者收发没有配对。"
        f"{where_ranks_wait(exc) or '没有 Rank 停在 torch.distributed 调用里'}。{advice}"
    )


def launch(rank_fn, world_size: int, args, what: str, fn, timeout: float = HANG_S, advice="", rule="", **kwargs):
    """``run_ranks(rank_fn, world_size, args, **kwargs).values`` for a checker; a hang or an error in the learner's
    ``fn`` becomes a :class:`CheckFailed` (``advice``: what to check on a hang; ``rule``: what the exercise allows)."""
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks

    try:
        return run_ranks(rank_fn, world_size, tuple(args), timeout=timeout, stream=False, quiet=True, **kwargs).values
    except RankTimeout as exc:
        raise hang_failure(exc, what, world_size, timeout, advice) from None
    except RankError as exc:
        raise rank_failure(exc, fn, what, rule) from None


def rank_tensor(values, dtype: str = "float32"):
    """``values`` as a tensor of ``dtype`` (a torch dtype's name) on this rank's device."""
    import torch

    from mgpu_helpers.launcher.ranks import rank_device

    return torch.tensor(np.asarray(values), dtype=getattr(torch, dtype), device=rank_device())


def as_numpy(t):
    """A tensor a rank's code returned, as NumPy (on the CPU); anything else as it is."""
    import torch

    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t


def _rank_main(rank, world_size, body, fn, payload, forbid, course):
    with WatchedCalls(refuse=forbid, course=course) as watched:
        out = body(rank, world_size, fn, payload, watched.calls)
    return out, list(watched.calls)


def _call_on_rank(rank, world_size, fn, payload, calls):
    inputs, extra, dtype = payload
    return as_numpy(fn(rank, world_size, rank_tensor(inputs[rank], dtype), *extra))


def run_watched(
    fn, what, world_size, payload, forbid=(), course=(), timeout=HANG_S, advice="", rule="", refusal="", body=None
):
    """``body(rank, world_size, fn, payload, calls)`` on ranks, ``calls`` filled as the learner's ``fn`` calls
    ``torch.distributed``: ``[(value, calls)]`` in rank order. The usual body calls ``fn(rank, world_size, x,
    *extra)``, ``x`` this rank's input as a tensor (``payload = (inputs, extra, dtype)``). Refused to ``fn``: the
    names ``forbid`` (``rule``: what is allowed) and ``course``, the course's code (objects or dotted names;
    ``refusal``: what to do instead). ``advice``: what to check on a hang."""
    course = resolve_course(course)
    refuse_course_code(fn, what, course, advice=refusal)
    args = (body or _call_on_rank, fn, payload, tuple(forbid), course)
    return launch(_rank_main, world_size, args, what, fn, timeout, advice, rule)


def launch_check(
    fn, what: str, world_size: int, inputs, extra=(), forbid=(), dtype="float32", timeout=HANG_S, course=()
):
    """``fn(rank, world_size, x, *extra)`` on ``world_size`` ranks (:func:`run_watched`): the values in rank order."""
    runs = run_watched(fn, what, world_size, (inputs, tuple(extra), dtype), forbid, course, timeout)
    return [value for value, _calls in runs]


def rank_failure(exc, fn, what: str, rule: str = "") -> CheckFailed:
    """The learner-facing failure for a :class:`~mgpu_helpers.RankError` from the learner's ``fn``: the stub, a rule
    of the exercise broken (the tags of :class:`~.watch.WatchedCalls`, or a rank left in its group), else the error."""
    if is_stub_error(exc):
        return not_done(fn, what)
    text = str(exc)

    def named(tag: str) -> str:  # what follows the watcher's tag in the message, to the end of its line
        return text.split(f"{tag} ", 1)[1].splitlines()[0].rstrip("'\".,")

    if "EXERCISE_NOT_LEFT" in text:
        return CheckFailed(
            f"{what}：rank {exc.rank} 返回时进程组还开着。最后要调用 "
            "dist.destroy_process_group()，让这个进程离开进程组。"
        )
    if "EXERCISE_COURSE_CODE" in text:
        return CheckFailed(
            f"{what}：rank {exc.rank} 调用了课程自己的 {named('EXERCISE_COURSE_CODE')}——这是课程自己的实现"
            "（或检查用的参考答案），不算你写的代码（换个名字或从别处 import 也一样）。在你的单元格里自己写出来。"
        )
    if "EXERCISE_FORBIDDEN" in text:
        name = named("EXERCISE_FORBIDDEN")
        if rule:
            return CheckFailed(
                f"{what}：这个练习只许用 {rule}，rank {exc.rank} 调用了 {name}（换个名字或从别处 import 也算）。"
            )
        return CheckFailed(
            f"{what}：这个练习要求自己用点对点通信实现，不能直接调用 {name}（rank {exc.rank}；"
            "换个名字或从别处 import 也算）。"
        )
    return CheckFailed(f"{what}：rank {exc.rank} 出错了（{exc.exc_type}）：{text.splitlines()[0]}")

"""Checkers for ex10: reading the evidence of a hang, and predicting where a hang will stop before it runs."""
from __future__ import annotations

import copy
import random

from mgpu_helpers.checks.core import CheckFailed, passed, call


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
        got = call(fn, what, ev)
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
    passed(f"find_mismatch 在 {len(cases)} 份随机的挂起证据（调用不一致、某个 Rank 没到）上都找对了。")


def _schedule_story(schedules) -> str:
    return "；".join(f"rank {r}: {' → '.join(ops)}" for r, ops in enumerate(schedules))


def _measured_stop(evidence) -> tuple:
    """(seq, rank, name) read from a real hang: the one rank whose pending collective differs from the rest."""
    from collections import Counter

    from mgpu_helpers.measure import diagnose

    where = {r: diagnose.pending(lines) for r, lines in evidence.outputs.items()}
    common, _ = Counter(where.values()).most_common(1)[0]
    odd = [r for r in sorted(where) if where[r] != common]
    if len(odd) != 1 or where[odd[0]] is None:
        raise RuntimeError(f"the hang did not stop as the schedules say (each rank's pending collective: {where})")
    return (where[odd[0]][0], odd[0], where[odd[0]][1])


def check_predict_hang(fn, world_size: int = 3, timeout: float = 10.0) -> None:
    """``fn(schedules) -> (seq, rank, name)``: before anything runs, from the list of collectives each rank will
    call, the number of the collective where the ranks part, the one rank that differs, and what it calls
    there. Checked on random schedules, then once against a real hang on ``world_size`` ranks."""
    from mgpu_helpers.launcher.errors import RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks
    from mgpu_helpers.measure import diagnose

    what = "predict_hang 要在运行之前说出挂起会停在哪里"
    rng = random.Random()
    for _ in range(10):
        n, length = rng.randint(3, 6), rng.randint(2, 7)
        k, odd = rng.randrange(length), rng.randrange(n)
        base = [rng.choice(COLLECTIVES) for _ in range(length)]
        schedules = [list(base) for _ in range(n)]
        schedules[odd][k] = rng.choice([c for c in COLLECTIVES if c != base[k]])
        want = (k, odd, schedules[odd][k])
        got = call(fn, what, copy.deepcopy(schedules))
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise CheckFailed(f"应当返回 (seq, rank, name) 三个值，实际得到 {got!r}。")
        if tuple(got) != want:
            raise CheckFailed(f"{n} 个 Rank 的调用顺序（{_schedule_story(schedules)}）：前 {k} 个 Collective 大家一样，"
                              f"第 #{k} 个上 rank {odd} 调用 {schedules[odd][k]}，别人调用 {base[k]}。应当回答 {want}，"
                              f"你的回答是 {tuple(got)}。序号从 0 开始数。")
    # Number first, then the ranks: a real hang, in the shape that gloo is known to block on
    # (rank 0 all-reduces while the others broadcast).
    k = rng.randint(1, 3)
    prefix = [rng.choice(("all_reduce", "broadcast")) for _ in range(k)]
    schedules = [prefix + ["broadcast", "all_reduce"] for _ in range(world_size)]
    schedules[0] = prefix + ["all_reduce", "broadcast"]
    predicted = tuple(call(fn, what, copy.deepcopy(schedules)))
    try:
        run_ranks(diagnose.run_schedule, world_size, args=(schedules,), timeout=timeout, stream=False, quiet=True)
    except RankTimeout as exc:
        measured = _measured_stop(exc)
    else:
        raise RuntimeError("the mismatched schedules were expected to hang")
    if predicted != measured:
        raise CheckFailed(f"真实运行（{_schedule_story(schedules)}）停在 #{measured[0]}：rank {measured[1]} 在 "
                          f"{measured[2]} 里，你预测的是 {predicted}。")
    passed(f"predict_hang 在 10 组随机调用顺序上都说对了；{world_size} 个 Rank 真的运行之后，"
           f"停在 #{measured[0]}、rank {measured[1]} 的 {measured[2]} 里，和你的预测一致。")

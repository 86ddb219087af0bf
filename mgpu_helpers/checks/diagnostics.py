"""Checkers of the diagnostics (notebook 10 and ex10): reading one rank's log, the speed-up from measured times,
the rank that waits least inside an all-reduce (notebook 10's fill-ins, ``try_*``); reading the evidence of a
hang and predicting where a hang will stop before it runs (ex10)."""

import copy
import random
import statistics

from mgpu_helpers.checks.core import (CheckFailed, call, course_code_reached, expect_items, fill_in_cell, first_hint,
                                      is_rank_number, number_answer, passed)
from mgpu_helpers.launcher.errors import RankTimeout
from mgpu_helpers.measure import diagnose, straggler
from mgpu_helpers.models import scaling


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
                         '  File "mgpu_helpers/launcher/rank_process.py", line 88 in main')
            continue
        op = odd_op if (kind == "mismatch" and r == odd_rank) else majority_op
        outputs[r] = lines + [f"[seq {finished}] enter {op}"]
        waiting[r] = f"dist.{op} (called from call, line 45)"
        stacks[r] = ('Current thread 0x00007f (most recent call first):\n'
                     f'  File "torch/distributed/distributed_c10d.py", line 2800 in {op}\n'
                     '  File "mgpu_helpers/measure/diagnose.py", line 45 in call\n'
                     '  File "train.py", line 60 in step\n  File "mgpu_helpers/launcher/rank_process.py", line 88 in main')
    msg = f"{world_size} of {world_size} rank(s) were still running after 5 s and have been ended."
    return RankTimeout(msg, stacks=stacks, waiting_in=waiting, rank=0, outputs=outputs)


def check_find_mismatch(fn) -> None:
    """``fn(evidence) -> (rank, seq, name)``: the rank to look at first in a hang's evidence, the number of
    the collective where it parted from the others, and the collective it is in (None when in none)."""
    what = "find_mismatch 要从挂起的证据里找出和别人不一样的 Rank"
    rng = random.Random()
    rounds = 12
    for _ in range(rounds):
        n = rng.randint(3, 6)
        kind = rng.choice(["mismatch", "late"])
        completed = rng.randint(2, 9)
        odd = rng.randrange(n)
        major = rng.choice(COLLECTIVES[:4])
        other = rng.choice([c for c in COLLECTIVES[:4] if c != major])
        got = call(fn, what, make_hang_evidence(n, completed, odd, kind, major, other))
        want = (odd, completed, other) if kind == "mismatch" else (odd, completed - 1, None)
        if got is None or len(tuple(got)) != 3:
            raise CheckFailed(f"应当返回 (rank, seq, name) 三个值，实际得到 {got!r}。")
        if tuple(got) != want:
            others = ", ".join(str(r) for r in range(n) if r != odd)
            if kind == "mismatch":
                story = f"rank {others} 都停在 #{completed} {major}，只有 rank {odd} 停在 #{completed} {other}"
            else:
                story = (f"rank {others} 都停在 #{completed - 1} {major}，rank {odd} 最后完成的是 #{completed - 2}，"
                         f"根本没有进入 #{completed - 1}（它不在任何 Collective 里）")
            raise CheckFailed(f"{n} 个 Rank 的证据：{story}。应当回答 {want}，你的回答是 {tuple(got)}。"
                              "看每个 Rank 输出里最后的 [seq k] enter/done 行，找和多数不一样的那个。")
    passed(f"find_mismatch 在 {rounds} 份随机的挂起证据（调用不一致、某个 Rank 没到）上都找对了。")


def _schedule_story(schedules) -> str:
    return "；".join(f"rank {r}: {' → '.join(ops)}" for r, ops in enumerate(schedules))


def _measured_stop(evidence) -> tuple:
    """(seq, rank, name) read from a real hang: the one rank whose pending collective differs from the rest."""
    from collections import Counter


    where = {r: diagnose.pending(lines) for r, lines in evidence.outputs.items()}
    common, _ = Counter(where.values()).most_common(1)[0]
    odd = [r for r in sorted(where) if where[r] != common]
    if len(odd) != 1 or where[odd[0]] is None:
        raise RuntimeError(f"the hang did not stop as the schedules say (each rank's pending collective: {where})")
    return (where[odd[0]][0], odd[0], where[odd[0]][1])


def check_predict_hang(fn, world_size: int = 3, timeout: float | None = None) -> None:
    """``fn(schedules) -> (seq, rank, name)``: before anything runs, from the list of collectives each rank will
    call, the number of the collective where the ranks part, the one rank that differs, and what it calls
    there. Checked on random schedules, then once against a real hang on ``world_size`` ranks."""
    from mgpu_helpers.launcher.launch import run_ranks
    what = "predict_hang 要在运行之前说出挂起会停在哪里"
    if timeout is None:                 # gloo ranks: 5 s; NCCL ranks (a GPU each) set up their communicator first
        from mgpu_helpers.hardware import choose_backend
        timeout = 5.0 if choose_backend(world_size)[0] == "gloo" else 10.0
    rng = random.Random()
    for _ in range(10):
        n, length = rng.randint(3, 6), rng.randint(2, 7)
        k, odd = rng.randrange(length), rng.randrange(n)
        base = [rng.choice(COLLECTIVES) for _ in range(length)]
        schedules = [list(base) for _ in range(n)]
        schedules[odd][k] = rng.choice([c for c in COLLECTIVES if c != base[k]])
        want = (k, odd, schedules[odd][k])
        got = call(fn, what, copy.deepcopy(schedules))
        expect_items(got, 3, f"应当返回 (seq, rank, name) 三个值，实际得到 {got!r}。")
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


# --------------------------------------------------------------------------------------------------------
# The fill-ins of notebook 10: read one rank's log, the speed-up from measured times, the rank that waits least.


def _random_log(rng: random.Random, done: int, pending_op: str | None, noise: bool = True) -> list[str]:
    """A rank's output lines: ``done`` collectives entered and finished, then maybe one entered only."""
    lines = ["rank ready"]
    for k in range(done):
        op = rng.choice(COLLECTIVES)
        lines.append(f"[seq {k}] enter {op}")
        if noise and rng.random() < 0.5:
            lines.append(f"step {k}: loss {rng.random():.4f}")
        lines.append(f"[seq {k}] done {op}")
    if pending_op is not None:
        lines.append(f"[seq {done}] enter {pending_op}")
        if noise and rng.random() < 0.5:
            lines.append("still computing the next batch")
    return lines


def check_stuck_in(fn) -> None:
    """``fn(lines) -> (seq, name) | None``: the collective one rank entered and never finished, read from its
    :class:`~mgpu_helpers.measure.diagnose.CollectiveLog` lines (None when every one it entered finished)."""
    what = "stuck_in 要从一个 Rank 的输出行里读出它进入了、却没有做完的 Collective"
    if course_code_reached(fn, (diagnose.pending, diagnose.hang_report), names=("pending", "hang_report")) is not None:
        raise CheckFailed(f"{what}：直接调用了课程自己的 mh.measure.diagnose.pending / hang_report，"
                          "这等于没有写：自己读那些 [seq k] enter/done 行。")
    rng = random.Random()
    # Edge cases first: nothing pending, pending at 0, two-digit numbers, the pending op equal to the last done,
    # output after the pending enter.
    cases = [(_random_log(rng, 3, None), None),
             (["rank ready", "[seq 0] enter broadcast"], (0, "broadcast")),
             (_random_log(rng, 12, "all_reduce"), (12, "all_reduce")),
             (["[seq 0] enter all_reduce", "[seq 0] done all_reduce", "[seq 1] enter all_reduce"], (1, "all_reduce")),
             (["rank ready", "loading data"], None),
             # the pending enter followed by ordinary output: an answer that trusts the last line fails here
             (["rank ready", "[seq 0] enter all_reduce", "[seq 0] done all_reduce", "[seq 1] enter broadcast",
               "still computing the next batch"], (1, "broadcast"))]
    for _ in range(10):
        done = rng.randint(0, 14)
        op = rng.choice((None,) + COLLECTIVES)
        cases.append((_random_log(rng, done, op), None if op is None else (done, op)))
    for lines, want in cases:
        got = call(fn, what, list(lines))
        if got is not None:
            expect_items(got, 2, f"{what}：应当返回 (seq, name) 或 None，实际得到 {got!r}。")
            got = tuple(got)
            if isinstance(got[0], str) and got[0].isdigit():
                raise CheckFailed(f"{what}：序号 {got[0]!r} 是字符串；写成整数 int(...)，才能和别的 Rank 的序号比较。")
        if got != want:
            story = "\n  ".join(lines[-4:])
            if want is None:
                why = "这个 Rank 进入的每个 Collective 都有 done 行：它不在任何 Collective 里，应当返回 None。"
            elif got is not None and f"[seq {got[0]}] done {got[1]}" in lines:
                why = f"#{got[0]} {got[1]} 已经有 done 行了，它做完了；要找的是只有 enter、没有 done 的那一个。"
            else:
                why = f"只有 enter、没有 done 的是 #{want[0]} {want[1]}。"
            raise CheckFailed(f"{what}：输出的最后几行是\n  {story}\n应当得到 {want}，你的函数给出 {got!r}。{why}")
    passed(f"stuck_in 在 {len(cases)} 份输出上（没有挂起的、挂在 #0 的、两位数序号的、夹着普通输出的）都读对了。")


try_stuck_in = fill_in_cell(check_stuck_in, diagnose.pending, "stuck_in：一个 Rank 卡在哪个 Collective")


def _reference_speedup(one_rank_s, per_rank_step_s):
    return one_rank_s / max(per_rank_step_s)


def check_measured_speedup(fn) -> None:
    """``fn(one_rank_s, per_rank_step_s) -> float``: the speed-up of a step on N ranks over one rank, from
    measured seconds; the N-rank step lasts as long as its slowest rank."""
    what = "measured_speedup 要从测到的秒数算出加速比"
    if course_code_reached(fn, (scaling.speedup, _reference_speedup), names=("speedup",)) is not None:
        raise CheckFailed(f"{what}：调用了课程自己的 speedup；自己用两个时间算出来。")
    rng = random.Random()
    cases = [(0.40, [0.10, 0.30, 0.12]),          # the slowest rank is neither the first nor the last
             (0.25, [0.05, 0.05, 0.05, 0.09]),    # the slowest is the last
             (0.12, [0.20, 0.08]),               # slower on 2 ranks than on one: a speed-up below 1
             (0.30, [0.30])]                     # one rank: 1
    for _ in range(8):
        n = rng.randint(2, 8)
        per = [rng.uniform(0.01, 0.2) for _ in range(n)]
        cases.append((rng.uniform(0.05, 0.8), per))
    for one, per in cases:
        got = call(fn, what, one, list(per))
        want = _reference_speedup(one, per)
        got = number_answer(got, f"{what}：应当返回一个数，实际得到 {got!r}。")
        if abs(got - want) <= 1e-9 * max(1.0, want):
            continue
        story = f"1 个 Rank {one * 1e3:.0f} ms，{len(per)} 个 Rank 各自 {[round(t * 1e3) for t in per]} ms"
        mistakes = [((max(per) / one,), "你算的是倒数：加速比 = 1 个 Rank 的时间 / N 个 Rank 的时间，变快时大于 1。"),
                    ((one / (sum(per) / len(per)),),
                     "你用了各 Rank 的平均；可这一步要等最慢的 Rank 做完才结束，N 个 Rank 的步时是最慢的那一个。"),
                    ((one / per[0], one / min(per)), "你只看了一个 Rank（rank 0 或最快的）；这一步要等最慢的 Rank 做完才结束。"),
                    ((one / sum(per),), "你把各 Rank 的时间加起来了；它们是同时在跑的，这一步只持续最慢那个 Rank 的时间。")]
        why = next((text for values, text in mistakes if any(abs(got - v) < 1e-9 for v in values)),
                   "N 个 Rank 的步时是最慢那个 Rank 的时间。")
        raise CheckFailed(f"{what}：{story}，加速比应当是 {want:.3g}，你的函数给出 {got:.3g}。{why}")
    passed(f"measured_speedup 在 {len(cases)} 组测量上（最慢的不是 rank 0、比 1 个 Rank 还慢、只有 1 个 Rank）都对。")


try_measured_speedup = fill_in_cell(check_measured_speedup, _reference_speedup, "measured_speedup：从测到的时间算加速比")


def _waiting_case(rng: random.Random, n: int, late: int, steps: int, hiccup: bool = False, warmup: bool = False,
                  factors=None):
    """Per-rank lists of seconds inside an all-reduce: the late rank only transfers, the others wait too.

    ``hiccup``: the late rank's last step stalls (a slow link, a page fault), enough to lift its mean above
    the others'. ``warmup``: its first step is long (connections set up), longer than the others' first.
    ``factors``: how long each early rank waits, relative to the others (default: random near 1)."""
    transfer = rng.uniform(0.001, 0.004)
    late_by = rng.uniform(0.02, 0.06)
    early = iter(factors or [rng.uniform(0.8, 1.2) for _ in range(n)])
    out = []
    for r in range(n):
        base = transfer if r == late else transfer + late_by * next(early)
        out.append([base * rng.uniform(0.99, 1.01) for _ in range(steps)])
    if hiccup:
        out[late][-1] = late_by * 2 * steps
    if warmup:
        out[late][0] = late_by * 1.5
    return out


def check_least_waiting(fn) -> None:
    """``fn(collective_s) -> rank``: ``collective_s[r]`` is rank r's per-step seconds inside the all-reduce
    (waiting included: no barrier before it); the rank that spends least time in it, by its median, is the
    one that arrived last."""
    what = "least_waiting 要找出在 All-Reduce 里待得最短的 Rank（按中位数）"
    course = course_code_reached(fn, (diagnose.medians, straggler.straggler_by_collective), names=("medians",))
    if course is not None:
        raise CheckFailed(f"{what}：调用了课程自己的 {course}；中位数自己求（statistics.median），再挑最短的。")
    rng = random.Random()
    cases = [_waiting_case(rng, 4, 3, 8, hiccup=True, factors=[1.2, 1.0, 0.8]),   # a stall: the mean misleads
             _waiting_case(rng, 3, 1, 6, warmup=True, factors=[1.2, 0.8]),       # a long first step
             _waiting_case(rng, 2, 0, 6),                                         # the late rank is rank 0
             _waiting_case(rng, 5, 2, 1)]                                         # one step only
    for _ in range(8):
        n = rng.randint(2, 8)
        cases.append(_waiting_case(rng, n, rng.randrange(n), rng.randint(5, 10), rng.random() < 0.5, rng.random() < 0.5))
    for per in cases:
        got = call(fn, what, [list(v) for v in per])
        want = straggler.straggler_by_collective(per)   # the shortest median: the rank that came last
        if not is_rank_number(got):
            raise CheckFailed(f"{what}：应当返回 Rank 的编号（一个整数），实际得到 {got!r}。")
        got = int(got)
        if got == want:
            continue
        med = [round(statistics.median(v) * 1e3, 1) for v in per]
        mean = [round(sum(v) / len(v) * 1e3, 1) for v in per]
        why = first_hint((got == max(range(len(per)), key=lambda r: statistics.median(per[r])),
                          "你选了待得最久的 Rank。可它待得久，是因为它早到、在里面等别人；"
                          "到得最晚的那个 Rank 一进去就能开始传，它的 All-Reduce 最短。"),
                         (got == min(range(len(per)), key=lambda r: sum(per[r]) / len(per[r])),
                          f"你按平均值选的（各 Rank 平均 {mean} ms）；有一步卡顿的话，平均值会被那一步拉高，中位数不会。"),
                         (got == min(range(len(per)), key=lambda r: per[r][0]), "你只看了第一步；要看每个 Rank 所有步的中位数。"))
        raise CheckFailed(f"{what}：各 Rank 在 All-Reduce 里的中位数是 {med} ms，应当是 rank {want}，"
                          f"你的函数给出 {got!r}。{why}")
    passed(f"least_waiting 在 {len(cases)} 组测量上（有卡顿的一步、只有一步、最晚到的是 rank 0）都找对了。")


try_least_waiting = fill_in_cell(check_least_waiting, straggler.straggler_by_collective,
                                 "least_waiting：在 All-Reduce 里待得最短的 Rank")

"""Checkers of the diagnostics (notebook 10 and ex10): hangs, flight-recorder dumps, a straggler or a slow path."""

import copy
import random
from collections import Counter

from mgpu_helpers.checks import core
from mgpu_helpers.checks.stragglers import COURSE_READERS, hold_straggler_readings, reference_straggler
from mgpu_helpers.launcher.errors import RankTimeout
from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.measure import diagnose
from mgpu_helpers.models.collectives import TORCH_FUNCTIONS

#: The calls a made-up hang's ranks are caught in: four collectives (the first four: a rank's majority op) and barrier.
HANG_OPS = (*(TORCH_FUNCTIONS[n][0] for n in ("all_reduce", "broadcast", "all_gather", "reduce_scatter")), "barrier")


def make_hang_evidence(
    world_size: int, completed: int, odd_rank: int, kind: str, majority_op: str, odd_op: str | None = None
):
    """A :class:`mgpu_helpers.RankTimeout` as the launcher would raise it after a hang, built by hand: its
    ``collectives[r]`` is ``{"last_completed": (seq, name), "stuck_in": (seq, name)}`` (numbered from 1, as the
    flight recorder does; either may be None). ``kind="mismatch"``: at collective ``completed`` ``odd_rank``
    entered ``odd_op``, the others ``majority_op``. ``kind="late"``: ``odd_rank`` finished only up to
    ``completed - 2`` and is still computing, while the others wait in ``majority_op`` at ``completed - 1``."""
    finished = completed - 2 if kind == "late" else completed - 1  # collectives 1..finished: every rank did them
    outputs, stacks, waiting, recorded = {}, {}, {}, {}
    done = (finished, ("all_reduce", "broadcast")[finished % 2]) if finished > 0 else None  # they alternate
    for r in range(world_size):
        outputs[r] = [f"rank {r} ready, world_size {world_size}"]
        outputs[r] += [f"step {k}: loss {1.0 / (k + 2):.4f}" for k in range(1, finished + 1)]
        if kind == "late" and r == odd_rank:  # still computing, in no collective
            outputs[r].append(f"step {finished + 1}: loading a slow batch")
            recorded[r] = {"last_completed": done, "stuck_in": None}
            frames = ['"train.py", line 31 in load_batch', '"train.py", line 52 in step']
        else:
            op = odd_op if (kind == "mismatch" and r == odd_rank) else majority_op
            recorded[r] = {"last_completed": done, "stuck_in": (finished + 1, op)}
            waiting[r] = f"dist.{op} (called from step, line 60)"
            frames = [f'"torch/distributed/distributed_c10d.py", line 2800 in {op}', '"train.py", line 60 in step']
        frames.append('"mgpu_helpers/launcher/rank_process.py", line 88 in main')
        stacks[r] = "Current thread 0x00007f (most recent call first):" + "".join(f"\n  File {f}" for f in frames)
    msg = f"{world_size} of {world_size} rank(s) were still running after 5 s and have been ended."
    return RankTimeout(msg, stacks=stacks, waiting_in=waiting, collectives=recorded, rank=0, outputs=outputs)


def check_find_mismatch(fn) -> None:
    """``fn(evidence) -> (rank, seq, name)``: the odd rank of a hang, where it parted and the collective it is in."""
    what = "find_mismatch 要从挂起的证据里找出和别人不一样的 Rank"
    rng = random.Random()
    rounds = 12
    for _ in range(rounds):
        n, kind, completed = rng.randint(3, 6), rng.choice(["mismatch", "late"]), rng.randint(2, 9)
        odd, (major, other) = rng.randrange(n), rng.sample(HANG_OPS[:4], 2)
        got = core.call(fn, what, make_hang_evidence(n, completed, odd, kind, major, other))
        want = (odd, completed, other) if kind == "mismatch" else (odd, completed - 1, None)
        core.expect_items(got, 3, f"应当返回 (rank, seq, name) 三个值，实际得到 {got!r}。")
        if tuple(got) != want:
            others = ", ".join(str(r) for r in range(n) if r != odd)
            story = f"rank {others} 都停在 #{completed} {major}，只有 rank {odd} 停在 #{completed} {other}"
            if kind == "late":
                story = (
                    f"rank {others} 都停在 #{completed - 1} {major}，rank {odd} 最后完成的是 #{completed - 2}，"
                    f"根本没有进入 #{completed - 1}（它不在任何 Collective 里）"
                )
            raise core.CheckFailed(
                f"{n} 个 Rank 的证据：{story}。应当回答 {want}，你的回答是 {tuple(got)}。"
                "看每个 Rank 的 flight recorder 摘要 evidence.collectives[r]，找和多数不一样的那个。"
            )
    core.passed(f"find_mismatch 在 {rounds} 份随机的挂起证据（调用不一致、某个 Rank 没到）上都找对了。")


def _schedule_story(schedules) -> str:
    return "；".join(f"rank {r}: {' → '.join(ops)}" for r, ops in enumerate(schedules))


def check_predict_hang(fn, world_size: int = 3, timeout: float = 5.0) -> None:
    """``fn(schedules) -> (seq, rank, name)``: before anything runs, from each rank's list of collectives, where the
    ranks part, the one rank that differs and what it calls there. Random schedules, then one real hang (gloo)."""
    what = "predict_hang 要在运行之前说出挂起会停在哪里"
    rng = random.Random()
    for _ in range(10):
        n, length = rng.randint(3, 6), rng.randint(2, 7)
        k, odd = rng.randrange(length), rng.randrange(n)
        base = [rng.choice(HANG_OPS) for _ in range(length)]
        schedules = [list(base) for _ in range(n)]
        schedules[odd][k] = rng.choice([c for c in HANG_OPS if c != base[k]])
        want = (k, odd, schedules[odd][k])
        got = core.call(fn, what, copy.deepcopy(schedules))
        core.expect_items(got, 3, f"应当返回 (seq, rank, name) 三个值，实际得到 {got!r}。")
        if tuple(got) != want:
            raise core.CheckFailed(
                f"{n} 个 Rank 的调用顺序（{_schedule_story(schedules)}）：前 {k} 个 Collective 大家一样，"
                f"第 #{k} 个上 rank {odd} 调用 {schedules[odd][k]}，别人调用 {base[k]}。应当回答 {want}，"
                f"你的回答是 {tuple(got)}。序号从 0 开始数。"
            )
    # Number first, then the ranks: a real hang, in the shape that gloo is known to block on
    # (rank 0 all-reduces while the others broadcast).
    prefix = rng.choices(("all_reduce", "broadcast"), k=rng.randint(1, 3))
    schedules = [prefix + ["broadcast", "all_reduce"] for _ in range(world_size)]
    schedules[0] = prefix + ["all_reduce", "broadcast"]
    predicted = tuple(core.call(fn, what, copy.deepcopy(schedules)))
    try:
        run_ranks(diagnose.run_schedule, world_size, (schedules,), "gloo", timeout, stream=False, quiet=True)
    except RankTimeout as exc:  # (seq from 0, rank, name): the one rank whose pending collective differs
        where = {r: c and c["stuck_in"] for r, c in exc.collectives.items()}
        common, _ = Counter(where.values()).most_common(1)[0]
        odd = [r for r in sorted(where) if where[r] != common]
        if len(odd) != 1 or where[odd[0]] is None:
            raise RuntimeError(
                f"the hang did not stop as the schedules say (each rank's pending collective: {where})"
            ) from exc
        measured = (where[odd[0]][0] - 1, odd[0], where[odd[0]][1])  # the flight recorder counts from 1
    else:
        raise RuntimeError("the mismatched schedules were expected to hang")
    if predicted != measured:
        raise core.CheckFailed(
            f"真实运行（{_schedule_story(schedules)}）停在 #{measured[0]}：rank {measured[1]} 在 "
            f"{measured[2]} 里，你预测的是 {predicted}。"
        )
    core.passed(
        f"predict_hang 在 10 组随机调用顺序上都说对了；{world_size} 个 Rank 真的运行之后，"
        f"停在 #{measured[0]}、rank {measured[1]} 的 {measured[2]} 里，和你的预测一致。"
    )


def _waiting_case(rng, n: int, late: int, steps: int, hiccup: bool = False, warmup: bool = False, factors=None):
    """Notebook 10's fill-in, per-rank seconds inside an all-reduce: the late rank only transfers, the others wait
    too. ``hiccup``: the late rank's last step stalls, lifting its mean above the others'; ``warmup``: its first
    step is long; ``factors``: how long each early rank waits, relative to the others (default: random near 1)."""
    transfer, late_by = rng.uniform(0.001, 0.004), rng.uniform(0.02, 0.06)
    early = iter(factors or [rng.uniform(0.8, 1.2) for _ in range(n)])
    bases = [transfer if r == late else transfer + late_by * next(early) for r in range(n)]
    out = [[base * rng.uniform(0.99, 1.01) for _ in range(steps)] for base in bases]
    if hiccup:
        out[late][-1] = late_by * 2 * steps
    if warmup:
        out[late][0] = late_by * 1.5
    return out


def _even_case(rng, n: int, steps: int, slow_s: float, stall: int | None = None):
    """Every rank equally long inside the collective (a slow path, nobody waits for anybody): ``slow_s`` give or
    take 1%; ``stall``: that rank's first step is stuck five times longer (its mean rises, its median does not)."""
    out = [[slow_s * rng.uniform(0.99, 1.01) for _ in range(steps)] for _ in range(n)]
    if stall is not None:
        out[stall][0] = slow_s * 5
    return out


def check_straggler_or_none(fn) -> None:
    """``fn(collective_s, noise_s) -> rank or None``: the rank whose median time inside the all-reduce is shorter
    than every other's by more than ``noise_s`` (the others waited for it), else None (look at the path). 08's
    check (:func:`~mgpu_helpers.checks.stragglers.hold_straggler_readings`) with the noise."""
    what = "straggler_or_none 要判断：是有一个 Rank 让别人等（返回它的编号），还是没有（返回 None）"
    rng, noise = random.Random(), 0.005  # the edge cases in every run, then random ones
    two_late = _waiting_case(rng, 4, 1, 6, factors=[1.0, 1.0, 1.0])
    two_late[3] = [t * rng.uniform(0.99, 1.01) for t in two_late[1]]  # ranks 1 and 3 both arrive last
    cases = [
        (_waiting_case(rng, 4, 3, 8, hiccup=True, factors=[1.2, 1.0, 0.8]), 3),  # a stall in the straggler
        (_waiting_case(rng, 2, 0, 6), 0),  # two ranks, rank 0 late
        (_even_case(rng, 4, 6, 0.030, stall=2), None),  # a slow path, one stall
        (_even_case(rng, 3, 5, 0.002), None),  # all short: nothing to find
        (two_late, None),  # two ranks arrive last
    ]
    for _ in range(8):
        n = rng.randint(2, 8)
        if rng.random() < 0.5:
            per = _waiting_case(rng, n, rng.randrange(n), rng.randint(5, 10), rng.random() < 0.5, rng.random() < 0.5)
        else:
            stall = rng.randrange(n) if rng.random() < 0.5 else None
            per = _even_case(rng, n, rng.randint(5, 10), rng.uniform(0.002, 0.05), stall=stall)
        cases.append((per, reference_straggler(per, noise)))
    hold_straggler_readings(
        fn, what, [(per, noise, want, f"{len(per)} 个 Rank") for per, want in cases], with_noise=True
    )
    core.passed(
        "straggler_or_none 在两种判断上都对：有一个 Rank 让别人等（含卡住的一步、rank 0、只有两个 Rank），"
        "以及没有（各 Rank 一样长、两个 Rank 同时最晚）。"
    )


def make_flight_dumps(world_size: int, at: int, culprit=None, kind=None, first=1, backend="gloo", rng=None) -> dict:
    """Notebook 10's hang fill-in, ``{rank: dump}``: each rank's flight-recorder dump, as ``pickle.load`` gives
    torch's own, after a hang at collective number ``at`` (numbers ``first``..``at``: the ring buffer may have
    dropped older ones, so an entry's place in the list is not its number). At ``at`` the ``culprit`` (None:
    nobody) has no entry (``kind="skipped"``), another collective (``"name"``) or other input sizes (``"size"``).
    Entries carry torch 2.13's fields; gloo marks none started or completed (finished ones are ``retired``)."""
    rng = rng or random.Random()
    ops = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")
    history = [(rng.choice(ops), [[rng.choice((4, 16, 1024, 4096))]]) for _ in range(first, at + 1)]
    last, other_op = history[-1], None
    if kind == "name":
        other_op = (rng.choice([o for o in ops if o != last[0]]), last[1])
    elif kind == "size":
        other_op = (last[0], [[last[1][0][0] * rng.choice((2, 4)) + rng.choice((0, 1))]])
    t0 = 1_796_445_700_000_000_000
    dumps = {}
    for r in range(world_size):
        calls = history if r != culprit else history[:-1] + ([] if kind == "skipped" else [other_op])
        entries = []
        for i, (op, sizes) in enumerate(calls):
            seq, done, nccl = first + i, first + i < at, backend != "gloo"
            t = t0 + seq * 1_000_000  # when it was created (each rank a nanosecond apart)
            entries.append(
                {
                    "record_id": i,
                    "pg_id": 0,
                    "process_group": ("0", "default_pg"),
                    "thread_name": "python",
                    "thread_id": "139999327099776",
                    "collective_seq_id": seq,
                    "p2p_seq_id": 0,
                    "op_id": seq,
                    "profiling_name": f"{backend}:{op}",
                    "time_created_ns": t + r,
                    "input_sizes": [list(s) for s in sizes],
                    "input_dtypes": ["Float"],
                    "output_sizes": [list(s) for s in sizes],
                    "output_dtypes": ["Float"],
                    "state": ("completed" if done else "started") if nccl else "scheduled",
                    "time_discovered_started_ns": t + 10 if nccl else None,
                    "time_discovered_completed_ns": t + 90 if nccl and done else None,
                    "retired": done,
                    "timeout_ms": 63000,
                    "is_p2p": False,
                }
            )
        reached = first + len(calls) - 1
        status = dict(last_enqueued_collective=reached, last_started_collective=-1)
        status["last_completed_collective"] = min(reached, at - 1)
        dumps[r] = {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world_size)))}},
            "comm_lib_version": "N/A",
            "pg_status": {"0": status},
            "entries": entries,
        }
    return dumps


def reference_culprit(dumps):
    """``(rank, seq, kind)``: the first collective number where the ranks' recorded calls differ, the one rank
    that differs there, and how (``"skipped"``, ``"name"`` or ``"size"``); None when all recorded the same."""
    key = lambda e: (e["profiling_name"], repr(e["input_sizes"]))
    calls = {r: {e["collective_seq_id"]: key(e) for e in d["entries"] if not e.get("is_p2p")} for r, d in dumps.items()}
    for seq in sorted(set().union(*calls.values())):
        here = {r: c.get(seq) for r, c in calls.items()}
        missing = [r for r, v in here.items() if v is None]
        if len(missing) == 1 and len(here) > 1:
            return (missing[0], seq, "skipped")
        common, _ = Counter(v for v in here.values() if v is not None).most_common(1)[0]
        if odd := [r for r, v in here.items() if v is not None and v != common]:
            return (odd[0], seq, "name" if here[odd[0]][0] != common[0] else "size")
    return None


def _calls_story(dumps, seq) -> str:
    def at(d):
        e = next((e for e in d["entries"] if e["collective_seq_id"] == seq), None)
        return "（没有这条记录）" if e is None else f"{e['profiling_name']} {e['input_sizes']}"

    return "；".join(f"rank {r}: {at(d)}" for r, d in sorted(dumps.items()))


def check_culprit(fn) -> None:
    """``fn(dumps) -> (rank, seq, kind) | None``: :func:`reference_culprit`, written by the learner."""
    what = "culprit 要从每个 Rank 的 flight recorder 记录里找出走岔的 Rank 和 Collective 序号"
    if (course := core.course_code_reached(fn, (reference_culprit,), names=("reference_culprit",))) is not None:
        raise core.CheckFailed(f"{what}：调用了课程自己的 {course}；自己去比较各 Rank 的 entries。")
    # the edge cases in every run (rank 0, two ranks, no culprit, each kind, NCCL), then random ones
    rng = random.Random()
    spec = [(3, 0, "name", "gloo"), (2, 0, "skipped", "gloo"), (4, None, None, "gloo"), (5, 3, "size", "gloo")]
    spec += [(4, 2, "skipped", "nccl"), (3, 1, "size", "nccl"), (8, None, None, "nccl")]
    for _ in range(6):
        n = rng.randint(3, 8)
        kind = rng.choice(("skipped", "name", "size", None))
        spec.append((n, None if kind is None else rng.randrange(n), kind, rng.choice(("gloo", "nccl"))))
    for n, culprit, kind, backend in spec:
        first = rng.choice((1, 1, rng.randint(2, 40)))
        at = first + rng.randint(1, 6)
        dumps = make_flight_dumps(n, at, culprit, kind, first=first, backend=backend, rng=rng)
        want = None if kind is None else (culprit, at, kind)
        got = core.call(fn, what, copy.deepcopy(dumps))
        if got is not None:
            core.expect_items(got, 3, f"{what}：应当返回 (rank, seq, kind) 三个值或 None，实际得到 {got!r}。")
            got = tuple(got)
        if got == want:
            continue
        if want is None:
            seqs = [e["collective_seq_id"] for e in dumps[0]["entries"]]
            raise core.CheckFailed(
                f"{what}：{n} 个 Rank 记下的调用完全一样（序号 {seqs[0]}..{seqs[-1]}），没有谁走岔，"
                f"应当返回 None，你的函数给出 {got!r}。"
            )
        rank, seq, kind = want
        story = f"{n} 个 Rank，序号 {seq} 上：{_calls_story(dumps, seq)}"
        seqs = [e["collective_seq_id"] for e in dumps[(rank + 1) % n]["entries"]]
        if got is None:
            why = core.first_hint(
                (kind == "size", "这个 Rank 调用的 Collective 名字和别人一样，只是 input_sizes 不同：也要比较大小。"),
                (
                    kind == "skipped",
                    f"rank {rank} 根本没有序号 {seq} 的记录：它没走到这一个 Collective，"
                    "一个 Rank 缺了某个序号也是走岔。",
                ),
                default=f"rank {rank} 的这一条和别人的不一样。",
            )
        else:
            wrong_seq = got[0] == rank and got[1] != seq
            why = core.first_hint(
                (
                    wrong_seq and seq in seqs and got[1] == seqs.index(seq),
                    "你给的是这条记录在 entries 列表里的下标；要的是它的 collective_seq_id（ring buffer 可能已经丢掉了"
                    "更早的记录，下标和序号对不上）。",
                ),
                (wrong_seq, "序号要用 entries 里的 collective_seq_id，而且是**第一个**各 Rank 不一致的序号。"),
                (
                    got[0] != rank and got[1] == seq,
                    f"rank {got[0]} 的记录和多数一样；和多数不一样（或缺了这条）的是 rank {rank}。"
                    + ("rank 0 也可能是走岔的那个，别拿它当标准。" if rank == 0 else ""),
                ),
                (
                    got[:2] == (rank, seq),
                    f'Rank 和序号都对，走岔的方式应当是 {kind!r}（"skipped" 没有这条记录，"name" 调了别的 Collective，'
                    '"size" 名字相同、input_sizes 不同）。',
                ),
            )
        raise core.CheckFailed(f"{what}：{story}。应当得到 {want!r}，你的函数给出 {got!r}。{why}")
    core.passed(
        f"culprit 在 {len(spec)} 组 flight recorder 记录上都找对了（2 到 8 个 Rank、rank 0 走岔、缺了一个序号、"
        "调了别的 Collective、别的大小、gloo 和 NCCL 的记录，以及没有人走岔的运行）。"
    )


try_straggler_or_none = core.fill_in_cell(
    check_straggler_or_none, reference_straggler, "straggler_or_none：等人还是链路慢", refuse=COURSE_READERS
)
try_culprit = core.fill_in_cell(check_culprit, reference_culprit, "culprit：从 flight recorder 记录里找出走岔的 Rank")

"""Checkers for ex11 and 11's part 3. ex11's answers are held against ranks that run the deterministic-cost straggler
step (each unit of shard a fixed sleep), so the measured times differ from the model only by the run's own wake-up
and start spread, which :mod:`mgpu_helpers.measure.straggler` measures in the same run."""

import math
import random
import statistics
from dataclasses import dataclass

from mgpu_helpers.checks import core
from mgpu_helpers.checks.collectives import busbw_mistake
from mgpu_helpers.checks.stragglers import READ_LONGEST, traced_run
from mgpu_helpers.measure import straggler
from mgpu_helpers.models import bandwidth, scaling

# The number-first exercise: one rank does all 24 units; four ranks split them 12/6/4/2, then 6/6/6/6.
SPEEDUP_TOTAL = 24
SPEEDUP_SHARDS = {"uneven": (12, 6, 4, 2), "balanced": (6, 6, 6, 6)}
SPEEDUP_SECONDS_PER_UNIT = 0.010

# The measured case of find_straggler: rank 1 holds the largest shard.
STRAGGLER_SHARDS = (4, 9, 6)
STRAGGLER_SECONDS_PER_UNIT = 0.010


def not_n_times(n: int) -> str:
    """The usual slip of a speed-up on uneven shards, said the same in ex11 and in 11's part 3."""
    return f"{n} 个 Rank 不会自动快 {n} 倍："


def measured_speedup(shards, single) -> dict:
    """The speed-up of ``shards`` over ``single`` (one rank doing all :data:`SPEEDUP_TOTAL` units), and ``low``,
    ``high``: the range this run's own spread allows (a median step lies between the model's and that plus
    :func:`~mgpu_helpers.measure.straggler.step_margin` plus the median all-reduce)."""
    unit = SPEEDUP_SECONDS_PER_UNIT
    runs = [single, traced_run(tuple(shards), 5, unit, "测量加速比")]
    ideal = [SPEEDUP_TOTAL * unit, max(shards) * unit]
    step = [straggler.median_step_seconds(r.values) for r in runs]
    slack = [
        straggler.step_margin(r.values, unit) + max(statistics.median(v["comm_s"]) for v in r.values) for r in runs
    ]
    low = min(step[0], ideal[0]) / (max(step[1], ideal[1] + slack[1]))
    high = max(step[0], ideal[0] + slack[0]) / min(step[1], ideal[1])
    return dict(speedup=scaling.speedup(step[0], step[1]), low=low, high=high)


def check_speedup_prediction(fn) -> None:
    """ex11, number first: ``fn() -> (uneven, balanced)``, the speed-ups of four ranks with :data:`SPEEDUP_SHARDS`
    over one rank doing all 24 units, each held against a real run, within its own spread plus 10%."""
    what = "predicted_speedups 要给出两个数：12/6/4/2 和 6/6/6/6 在四个 Rank 上各比一个 Rank 快几倍"
    guess = core.call(fn, what)
    shape = f"{what}：应当返回两个数 (12/6/4/2 的加速比, 6/6/6/6 的加速比)，实际得到 {guess!r}。"
    core.expect_items(guess, 2, shape, numbers=True)
    ms, lines = 1e3 * SPEEDUP_SECONDS_PER_UNIT, []
    single = traced_run((SPEEDUP_TOTAL,), 5, SPEEDUP_SECONDS_PER_UNIT, "测量加速比")
    for (name, shards), g in zip(SPEEDUP_SHARDS.items(), guess):
        m = measured_speedup(shards, single)
        low, high = m["low"] * 0.9, m["high"] * 1.1
        label = "/".join(str(u) for u in shards)
        if not low <= float(g) <= high:
            nudge = "四份一样大时，一步只剩下多少个单位的时间？"
            if name == "uneven":
                slip = not_n_times(len(shards)) if math.isclose(float(g), len(shards)) else ""
                nudge = f"{slip}一步要等到拿 {max(shards)} 个单位的 Rank 做完；一个 Rank 做完 {SPEEDUP_TOTAL} 个单位要多久？"
            raise core.CheckFailed(
                f"Shard {label}、每单位 {ms:g} ms：四个 Rank 上量到加速比 {m['speedup']:.2f}×"
                f"（这次运行允许的范围 {low:.2f}–{high:.2f}），你的预测是 {float(g):.2f}×。{nudge}"
            )
        lines.append(f"{label} 你预测 {float(g):.2f}×，量到 {m['speedup']:.2f}×")
    core.passed("；".join(lines) + "。")


def reference_straggler(values) -> tuple[int, float]:
    """ex11: (the rank with the largest median compute, the median over steps of max - mean compute)."""
    compute = [v["compute_s"] for v in values]
    medians = [statistics.median(c) for c in compute]
    rank = max(range(len(values)), key=lambda r: medians[r])
    return rank, statistics.median(max(step) - statistics.fmean(step) for step in zip(*compute))


def _synthetic_values(rng: random.Random, steps: int = 5) -> list[dict]:
    """Per-rank records shaped like ``straggler_step``'s, with one clear straggler and one stalled step of
    another rank (it outlasts the straggler in that step only: a sum or a maximum over steps is fooled)."""
    n = rng.randint(2, 6)
    base = [rng.uniform(0.02, 0.10) for _ in range(n)]
    slow = rng.randrange(n)
    base[slow] = max(base) * rng.uniform(1.3, 2.0)
    compute = [[b * rng.uniform(1.0, 1.05) for _ in range(steps)] for b in base]
    stalled, k = rng.choice([r for r in range(n) if r != slow]), rng.randrange(steps)
    compute[stalled][k] = base[slow] * rng.uniform(5.0, 8.0)
    last = [max(compute[q][s] for q in range(n)) for s in range(steps)]
    comm = [[rng.uniform(1e-4, 1e-3) for _ in range(steps)] for _ in range(n)]
    wait = [[last[s] - compute[r][s] for s in range(steps)] for r in range(n)]
    return [
        dict(rank=r, shard=None, compute_s=compute[r], wait_s=wait[r], comm_s=comm[r], start_skew_s=[0.0] * steps)
        for r in range(n)
    ]


def _rank_and_seconds(got) -> bool:
    return isinstance(got, (tuple, list)) and len(got) == 2 and core.is_number(got[1])


def check_find_straggler(fn) -> None:
    """``fn(values) -> (rank, lost_s)``: :func:`reference_straggler` on per-rank records as
    :func:`mgpu_helpers.measure.straggler.run_traced` returns them; random ones with a stalled step, then a real run."""
    what = "find_straggler 要从逐 Rank 的记录里找出 Straggler，并给出每步因此多花的秒数"
    rng = random.Random()
    for _ in range(30):
        values = _synthetic_values(rng)
        want = reference_straggler(values)
        got = core.call(fn, what, values)
        medians = [round(1e3 * statistics.median(v["compute_s"]), 1) for v in values]
        where = f"{len(values)} 个 Rank，每个 Rank 计算时间的中位数 {medians} ms"
        if not _rank_and_seconds(got):
            raise core.CheckFailed(f"{where}：应当返回 (rank, 秒数)，实际得到 {got!r}。")
        rank, lost = got
        if rank != want[0]:
            waits = [statistics.median(v["wait_s"]) for v in values]
            why = ""  # both can hold: with two ranks the stalled one is also the one that waits most
            if rank == max(range(len(values)), key=lambda r: waits[r]):
                why += f"rank {rank} 等得最久，它恰恰是最快到达的那个；Straggler 是别人都在等的 Rank。"
            if rank == max(range(len(values)), key=lambda r: sum(values[r]["compute_s"])):
                why += f"rank {rank} 的计算总和最大，是因为它有一步被卡住了；一步的意外不代表它每步都慢，用中位数。"
            raise core.CheckFailed(f"{where}：Straggler 是 rank {want[0]}，你给的是 rank {rank}。{why}")
        if not math.isclose(float(lost), want[1], rel_tol=1e-6, abs_tol=1e-9):
            raise core.CheckFailed(
                f"{where}：每步因为不均衡多花的时间（每步 最大计算 − 平均计算，取各步中位数）"
                f"应当是 {1e3 * want[1]:.2f} ms，你给的是 {1e3 * float(lost):.2f} ms。"
                "如果一步都按最慢的 Rank 走、而工作能均分，每步能省下多少？"
            )
    s = STRAGGLER_SECONDS_PER_UNIT
    run = traced_run(STRAGGLER_SHARDS, 5, s, what)
    got = core.call(fn, what, run.values)
    model_rank = max(range(len(STRAGGLER_SHARDS)), key=lambda r: STRAGGLER_SHARDS[r])
    model_lost = (max(STRAGGLER_SHARDS) - statistics.fmean(STRAGGLER_SHARDS)) * s
    margin = straggler.model_margin(run.values, s) + 0.1 * model_lost
    label = "/".join(str(u) for u in STRAGGLER_SHARDS)
    if not _rank_and_seconds(got) or got[0] != model_rank or abs(float(got[1]) - model_lost) > margin:
        raise core.CheckFailed(
            f"真实的 {len(STRAGGLER_SHARDS)} 个 Rank（Shard {label}，每单位 {1e3 * s:g} ms）：应当是 "
            f"rank {model_rank}、约 {1e3 * model_lost:.0f} ms（误差上限 ±{1e3 * margin:.0f} ms），"
            f"你的函数给出 {got!r}。"
        )
    core.passed(
        f"find_straggler 在 30 组带一次意外卡顿的随机记录上都对；真实的 Shard {label} 上找出 rank {got[0]}，"
        f"每步多花 {1e3 * float(got[1]):.0f} ms（模型 {1e3 * model_lost:.0f} ms）。"
    )


# Notebook 11, part 3: numbers the learner reads off a run made on this machine, in 11 itself.
#
# One launch of three ranks does two things: the straggler step of 08 (each rank sleeps shard * unit, then
# all-reduces a small gradient, timed on each rank WITHOUT a barrier before it, so the early ranks' time
# inside the all-reduce holds their wait, as in a real trace), and an all-reduce of two sizes, timed. The
# shards are shuffled for every run: the straggler's rank, and every number, come from this run only.

REVIEW_SHARDS = (1, 3, 6)
REVIEW_SECONDS_PER_UNIT = 0.005
REVIEW_STEPS = 5


@dataclass(frozen=True)
class ReviewRun:
    """What :func:`review_run` measured (milliseconds unless named): per rank the median compute, time
    inside the all-reduce and whole step; one rank's step doing every unit alone; the all-reduce sizes."""

    backend: str
    shards: tuple
    compute_ms: tuple
    allreduce_ms: tuple
    step_ms: tuple
    solo_ms: float
    sweep: tuple  # ((nbytes, median seconds), ...)

    @property
    def world_size(self) -> int:
        return len(self.shards)

    @property
    def straggler(self) -> int:
        return max(range(self.world_size), key=lambda r: self.compute_ms[r])


def _review_rank(rank, world_size, shards, seconds_per_unit, steps, sizes, iters):
    """11's measurements on one rank, as the comment above :data:`REVIEW_SHARDS` says."""
    import time

    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device
    from mgpu_helpers.measure.timing import synchronize_device
    from mgpu_helpers.measure.workloads import straggler_step

    step = straggler_step(
        rank, world_size, shards, 4096, steps, seconds_per_unit=seconds_per_unit, timestamp_barrier=False
    )
    solo = []
    for _ in range(steps if rank == 0 else 0):  # one rank doing every unit alone: the baseline
        t = time.perf_counter()
        time.sleep(sum(shards) * seconds_per_unit)
        solo.append(time.perf_counter() - t)
    dev, sweep = rank_device(), []
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, device=dev)
        dist.all_reduce(x)
        times = []
        for _ in range(iters):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(x)
            synchronize_device(dev)  # finished on the device too
            times.append(time.perf_counter() - t)
        sweep.append((nbytes, statistics.median(times)))
    return dict(solo=solo, compute=step["compute_s"], inside=step["comm_s"], sweep=sweep)


def review_run() -> ReviewRun:
    """Run 11's measurements (one launch of three ranks) and print them, rounded as the questions use them."""
    from mgpu_helpers import hardware
    from mgpu_helpers.launcher.launch import run_ranks

    n = len(REVIEW_SHARDS)
    shards = tuple(random.sample(REVIEW_SHARDS, n))
    backend, _ = hardware.choose_backend(n, "auto")
    sizes = (64 << 20, 256 << 20) if backend == "nccl" else (1 << 20, 4 << 20)
    args = (shards, REVIEW_SECONDS_PER_UNIT, REVIEW_STEPS, sizes, 5)
    res = run_ranks(_review_rank, n, args=args, timeout=120, stream=False, quiet=True)
    v = res.values
    ms = lambda xs: round(1e3 * statistics.median(xs), 2)
    compute, inside = tuple(ms(r["compute"]) for r in v), tuple(ms(r["inside"]) for r in v)
    step = tuple(ms([c + a for c, a in zip(r["compute"], r["inside"])]) for r in v)
    sweep = tuple((nbytes, float(f"{max(r['sweep'][k][1] for r in v):.3g}")) for k, nbytes in enumerate(sizes))
    run = ReviewRun(res.backend, shards, compute, inside, step, ms(v[0]["solo"]), sweep)
    unit = 1e3 * REVIEW_SECONDS_PER_UNIT
    print(f"后端 {run.backend}，{n} 个 Rank；每个工作单位 {unit:g} ms，共 {sum(shards)} 个单位。")
    print(f"一个 Rank 独自做完全部 {sum(shards)} 个单位：一步 {run.solo_ms:.2f} ms")
    print(f"{n} 个 Rank 一起做（每步先各算自己的 Shard，再 All-Reduce 一个 16 KiB 的梯度；各步中位数）：")
    for r in range(n):
        print(f"  rank {r}：计算 {compute[r]:6.2f} ms，All-Reduce 里 {inside[r]:6.2f} ms，一步 {step[r]:6.2f} ms")
    print("单独量的 All-Reduce（每次之前先对齐所有 Rank，取最慢 Rank 的中位数）：")
    for nbytes, seconds in sweep:
        print(f"  S = {nbytes} 字节（{nbytes / 2**20:g} MiB）：t = {seconds * 1e3:.3g} ms")
    return run


def _near(got, want, rel: float) -> bool:
    return core.is_number(got) and math.isclose(float(got), want, rel_tol=rel, abs_tol=1e-9)


def review_answers(run: ReviewRun) -> dict:
    """The answers 11's part 3 expects from ``run`` (what its worked version computes)."""
    s = run.straggler
    nbytes, seconds = run.sweep[-1]
    return dict(
        straggler=s,
        comm_ms=run.allreduce_ms[s],
        busbw_gbps=bandwidth.busbw("all_reduce", nbytes, seconds, run.world_size) / 1e9,
        speedup=scaling.speedup(run.solo_ms, max(run.step_ms)),
    )


# What is wrong with each answer of 11's part 3 (None: it is right), one function per question: the usual
# wrong answers, each with what to say, in the order they are tried.

AGAIN = "对照上面打印的数，再算一遍。"


def _straggler_mistake(run: ReviewRun, got) -> str | None:
    n, longest = run.world_size, max(range(run.world_size), key=lambda r: run.allreduce_ms[r])
    if got == run.straggler:
        return None
    return core.first_hint(
        (got == longest, f"rank {longest}：{READ_LONGEST}等待被算成了“通信”。"),
        (not core.is_rank_number(got) or not 0 <= got < n, f"要写一个 Rank 编号（0 到 {n - 1}）。"),
        default=AGAIN,
    )


def _comm_mistake(run: ReviewRun, got) -> str | None:
    want = review_answers(run)["comm_ms"]
    if _near(got, want, 0.05) or core.is_number(got) and abs(float(got) - want) <= 0.05:
        return None
    return core.first_hint(
        (_near(got, max(run.allreduce_ms), 0.05), "这是在 All-Reduce 里待得最久的 Rank：里面大部分是等待。"),
        (_near(got, statistics.fmean(run.allreduce_ms), 0.05), "平均值把等待也摊了进来。"),
        (_near(got, max(run.step_ms), 0.05), "这是整个一步的时间，包含了计算。"),
        default=AGAIN,
    )


def _busbw_mistake(run: ReviewRun, got) -> str | None:
    if not core.is_number(got):
        return "要写一个数（GB/s）。"
    nbytes, seconds = run.sweep[-1]
    why = busbw_mistake(float(got), "all_reduce", nbytes, seconds, run.world_size, unit=1e9, rel_tol=0.02)
    return why if why != "" else AGAIN


def _speedup_mistake(run: ReviewRun, got) -> str | None:
    want, n = review_answers(run)["speedup"], run.world_size
    if _near(got, want, 0.02):
        return None
    mean_step = scaling.speedup(run.solo_ms, statistics.fmean(run.step_ms))
    model = _near(got, sum(run.shards) / max(run.shards), 0.005)
    return core.first_hint(
        (_near(got, 1 / want, 0.02), "倒过来了：加速比 = 单个 Rank 的一步 ÷ 多个 Rank 的一步。"),
        (_near(got, mean_step, 0.02), "一步要等最慢的 Rank：用最长的那一步，不是平均。"),
        (_near(got, float(n), 0.02), not_n_times(n) + "Shard 不一样大。"),
        (model, "这是只数工作单位的模型值；题目问的是这次量到的，通信和唤醒的时间也在里面。"),
        default=AGAIN,
    )


def check_review_answers(run: ReviewRun, straggler=None, comm_ms=None, busbw_gbps=None, speedup=None) -> None:
    """11's part 3: one line per answer held against ``run``, then a failure if any was wrong."""
    want = review_answers(run)
    n, s = run.world_size, run.straggler
    nbytes, _seconds = run.sweep[-1]
    factor = bandwidth.BUSBW_FACTORS["all_reduce"](n)
    rows = (  # (question, the learner's answer, what names its mistake, the right answer, said once it is given)
        (
            "1. Straggler 是哪个 Rank",
            straggler,
            _straggler_mistake,
            f"rank {s}，计算最久，所以它在 All-Reduce 里待得最短。",
        ),
        (
            "2. 一次 All-Reduce 真正花在通信上的大约多少 ms",
            comm_ms,
            _comm_mistake,
            f"约 {want['comm_ms']:.2f} ms：最后到的 Rank 不用等，它在 All-Reduce 里的时间最接近纯通信。",
        ),
        (
            f"3. S = {nbytes} 字节那一次 All-Reduce 的 busbw（GB/s）",
            busbw_gbps,
            _busbw_mistake,
            f"约 {want['busbw_gbps']:.3g} GB/s（algbw {want['busbw_gbps'] / factor:.3g} GB/s × {factor:.3g}）。",
        ),
        (
            f"4. {n} 个 Rank 比一个 Rank 快几倍",
            speedup,
            _speedup_mistake,
            f"约 {want['speedup']:.3g} 倍（{run.solo_ms:.2f} ÷ {max(run.step_ms):.2f}）。",
        ),
    )
    wrong = 0
    for label, got, mistake, done in rows:
        if got is None:
            print(f"{label}：还没写（上面那格还是 None）。")
        elif (why := mistake(run, got)) is None:
            print(f"通过：{label}：{done}")
        else:
            wrong += 1
            print(f"不对：{label}：你的答案 {got!r}。{why}")
    if wrong:
        raise core.CheckFailed(f"{wrong} 个答案不对：看上面每一行说的原因，改好再运行这一格。")

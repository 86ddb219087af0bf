"""Checkers for ex11: the review's numbers (speed-up and efficiency, a straggler's cost) worked by the learner.

Two of them hold the learner's answer against ranks that run the deterministic-cost straggler step
(:func:`mgpu_helpers.measure.workloads.straggler_step` with ``seconds_per_unit``): each unit of shard is a
fixed sleep, so the measured times differ from the model only by the run's own wake-up and start spread,
which :mod:`mgpu_helpers.measure.straggler` measures in the same run.
"""
from __future__ import annotations

import math
import random
import statistics

from mgpu_helpers.checks.core import CheckFailed, call, is_number, passed
from mgpu_helpers.checks.stragglers import traced_run

# The number-first exercise: one rank does all 24 units; four ranks split them 12/6/4/2, then 6/6/6/6.
SPEEDUP_TOTAL = 24
SPEEDUP_SHARDS = {"uneven": (12, 6, 4, 2), "balanced": (6, 6, 6, 6)}
SPEEDUP_SECONDS_PER_UNIT = 0.010

# The measured case of find_straggler: rank 1 holds the largest shard.
STRAGGLER_SHARDS = (4, 9, 6)
STRAGGLER_SECONDS_PER_UNIT = 0.010


# --------------------------------------------------------------------------------------------------------
# Exercise 1: speed-up and strong-scaling efficiency.


def check_speedup_efficiency(fn) -> None:
    """``fn(t1_s, tn_s, world_size) -> (speedup, efficiency)``: strong scaling, the same job on world_size ranks."""
    from mgpu_helpers.models import scaling

    what = "speedup_and_efficiency 要返回 (加速比, 强扩展效率)"
    rng = random.Random()
    cases = [(0.400, 0.250, 2), (1.0, 1.0, 1), (0.400, 0.500, 4)]
    cases += [(rng.uniform(0.01, 10), rng.uniform(0.001, 10), rng.randint(1, 16)) for _ in range(40)]
    for t1, tn, n in cases:
        got = call(fn, what, t1, tn, n)
        want = (scaling.speedup(t1, tn), scaling.strong_scaling_efficiency(t1, tn, n))
        where = f"单卡一步 {1e3 * t1:.4g} ms，{n} 张卡一步 {1e3 * tn:.4g} ms"
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(is_number(v) for v in got):
            raise CheckFailed(f"{where}：应当返回两个数 (加速比, 效率)，实际得到 {got!r}。")
        s, e = (float(v) for v in got)
        if not math.isclose(s, want[0], rel_tol=1e-9):
            why = ""
            if math.isclose(s, tn / t1, rel_tol=1e-9):
                why = "你算的是 多卡步时 ÷ 单卡步时，倒过来了；加速比 > 1 才表示变快。"
            raise CheckFailed(f"{where}：加速比应当是 {want[0]:.4g}，你给的是 {s:.4g}。{why}")
        if not math.isclose(e, want[1], rel_tol=1e-9):
            why = ""
            if math.isclose(e, want[0], rel_tol=1e-9) and n > 1:
                why = f"效率还要除以卡数：{n} 张卡理想情况下应当快 {n} 倍。"
            raise CheckFailed(f"{where}：效率应当是 {want[1]:.4g}，你给的是 {e:.4g}。{why}")
    passed(f"speedup_and_efficiency 在 {len(cases)} 组步时上都对（400 ms 对 250 ms、两张卡：1.6×，80%）。")


# --------------------------------------------------------------------------------------------------------
# Exercise 2: a number first, then ranks measure it.


def measured_speedup(shards, total: int = SPEEDUP_TOTAL, seconds_per_unit: float = SPEEDUP_SECONDS_PER_UNIT,
                     steps: int = 5, single=None) -> dict:
    """Measure the speed-up of ``shards`` on ``len(shards)`` ranks over one rank doing ``total`` units.

    Returns ``speedup`` (median step of one rank / median step of the ranks), ``low`` and ``high``: the range
    the speed-up can take given this run's own spread (each median step lies between the model's
    ``max shard * seconds_per_unit`` and that plus :func:`~mgpu_helpers.measure.straggler.step_margin` plus the
    median all-reduce). ``single``: a one-rank run to reuse (RankResults), so several shardings share it.
    """
    from mgpu_helpers.measure import straggler

    what = "测量加速比"
    runs = [single if single is not None else traced_run((total,), steps, seconds_per_unit, what),
            traced_run(tuple(shards), steps, seconds_per_unit, what)]
    ideal = [total * seconds_per_unit, max(shards) * seconds_per_unit]
    step = [straggler.median_step_seconds(r.values) for r in runs]
    slack = [straggler.step_margin(r.values, seconds_per_unit)
             + max(statistics.median(v["comm_s"]) for v in r.values) for r in runs]
    low = min(step[0], ideal[0]) / (max(step[1], ideal[1] + slack[1]))
    high = max(step[0], ideal[0] + slack[0]) / min(step[1], ideal[1])
    return dict(speedup=step[0] / step[1], low=low, high=high, single=runs[0])


def check_speedup_prediction(fn) -> None:
    """``fn() -> (uneven, balanced)``: the learner's predicted speed-ups of four ranks with shards 12/6/4/2
    and 6/6/6/6 over one rank doing all 24 units (10 ms per unit). Runs them on real ranks and compares each
    with the measured speed-up, within the range this run's own spread allows plus 10%."""
    what = "predicted_speedups 要给出两个数：12/6/4/2 和 6/6/6/6 在四个 Rank 上各比一个 Rank 快几倍"
    guess = call(fn, what)
    if not isinstance(guess, (tuple, list)) or len(guess) != 2 or not all(is_number(v) for v in guess):
        raise CheckFailed(f"{what}：应当返回两个数 (12/6/4/2 的加速比, 6/6/6/6 的加速比)，实际得到 {guess!r}。")
    ms = 1e3 * SPEEDUP_SECONDS_PER_UNIT
    single = None
    lines = []
    for (name, shards), g in zip(SPEEDUP_SHARDS.items(), guess):
        m = measured_speedup(shards, single=single)
        single = m["single"]
        low, high = m["low"] * 0.9, m["high"] * 1.1
        label = "/".join(str(u) for u in shards)
        if not low <= float(g) <= high:
            nudge = (f"一步要等到拿 {max(shards)} 个单位的 Rank 做完；一个 Rank 做完 {SPEEDUP_TOTAL} 个单位要多久？"
                     if name == "uneven" else "四份一样大时，一步只剩下多少个单位的时间？")
            if name == "uneven" and math.isclose(float(g), len(shards)):
                nudge = "四个 Rank 不会自动快四倍：" + nudge
            raise CheckFailed(f"Shard {label}、每单位 {ms:g} ms：四个 Rank 上量到加速比 {m['speedup']:.2f}×"
                              f"（这次运行允许的范围 {low:.2f}–{high:.2f}），你的预测是 {float(g):.2f}×。{nudge}")
        lines.append(f"{label} 你预测 {float(g):.2f}×，量到 {m['speedup']:.2f}×")
    passed("；".join(lines) + "。")


# --------------------------------------------------------------------------------------------------------
# Exercise 3: the straggler and what it costs, from per-rank evidence (not the average).


def reference_straggler(values) -> tuple[int, float]:
    """(the rank with the largest median compute, the median over steps of max compute - mean compute)."""
    medians = [statistics.median(v["compute_s"]) for v in values]
    rank = max(range(len(values)), key=lambda r: medians[r])
    steps = len(values[0]["compute_s"])
    lost = statistics.median(max(v["compute_s"][k] for v in values)
                             - statistics.fmean(v["compute_s"][k] for v in values) for k in range(steps))
    return rank, lost


def _synthetic_values(rng: random.Random, steps: int = 5) -> list[dict]:
    """Per-rank records shaped like ``straggler_step``'s, with one clear straggler and one stalled step of
    another rank (it outlasts the straggler in that step only: a sum or a maximum over steps is fooled)."""
    n = rng.randint(2, 6)
    base = [rng.uniform(0.02, 0.10) for _ in range(n)]
    slow = rng.randrange(n)
    base[slow] = max(base) * rng.uniform(1.3, 2.0)
    compute = [[b * rng.uniform(1.0, 1.05) for _ in range(steps)] for b in base]
    others = [r for r in range(n) if r != slow]
    stalled, k = rng.choice(others), rng.randrange(steps)
    compute[stalled][k] = base[slow] * rng.uniform(5.0, 8.0)
    values = []
    for r in range(n):
        last = [max(compute[q][s] for q in range(n)) for s in range(steps)]
        values.append(dict(rank=r, shard=None, compute_s=compute[r],
                           wait_s=[last[s] - compute[r][s] for s in range(steps)],
                           comm_s=[rng.uniform(1e-4, 1e-3) for _ in range(steps)], start_skew_s=[0.0] * steps))
    return values


def check_find_straggler(fn) -> None:
    """``fn(values) -> (rank, lost_s)``: the straggler of a run (per-rank records as
    :func:`mgpu_helpers.measure.straggler.run_traced` returns them) and the median seconds per step that
    uneven work costs (max compute - mean compute). Random records with a stalled step first, then a real run."""
    from mgpu_helpers.measure import straggler

    what = "find_straggler 要从逐 Rank 的记录里找出 Straggler，并给出每步因此多花的秒数"
    rng = random.Random()
    for _ in range(30):
        values = _synthetic_values(rng)
        want = reference_straggler(values)
        got = call(fn, what, values)
        medians = [round(1e3 * statistics.median(v["compute_s"]), 1) for v in values]
        where = f"{len(values)} 个 Rank，每个 Rank 计算时间的中位数 {medians} ms"
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not is_number(got[1]):
            raise CheckFailed(f"{where}：应当返回 (rank, 秒数)，实际得到 {got!r}。")
        rank, lost = got
        if rank != want[0]:
            waits = [statistics.median(v["wait_s"]) for v in values]
            why = ""   # both can hold: with two ranks the stalled one is also the one that waits most
            if rank == max(range(len(values)), key=lambda r: waits[r]):
                why += f"rank {rank} 等得最久，它恰恰是最快到达的那个；Straggler 是别人都在等的 Rank。"
            if rank == max(range(len(values)), key=lambda r: sum(values[r]["compute_s"])):
                why += f"rank {rank} 的计算总和最大，是因为它有一步被卡住了；一步的意外不代表它每步都慢，用中位数。"
            raise CheckFailed(f"{where}：Straggler 是 rank {want[0]}，你给的是 rank {rank}。{why}")
        if not math.isclose(float(lost), want[1], rel_tol=1e-6, abs_tol=1e-9):
            raise CheckFailed(f"{where}：每步因为不均衡多花的时间（每步 最大计算 − 平均计算，取各步中位数）"
                              f"应当是 {1e3 * want[1]:.2f} ms，你给的是 {1e3 * float(lost):.2f} ms。"
                              "如果一步都按最慢的 Rank 走、而工作能均分，每步能省下多少？")
    s = STRAGGLER_SECONDS_PER_UNIT
    run = traced_run(STRAGGLER_SHARDS, 5, s, what)
    got = call(fn, what, run.values)
    model_rank = max(range(len(STRAGGLER_SHARDS)), key=lambda r: STRAGGLER_SHARDS[r])
    model_lost = (max(STRAGGLER_SHARDS) - statistics.fmean(STRAGGLER_SHARDS)) * s
    margin = straggler.model_margin(run.values, s) + 0.1 * model_lost
    label = "/".join(str(u) for u in STRAGGLER_SHARDS)
    if (not isinstance(got, (tuple, list)) or len(got) != 2 or not is_number(got[1])
            or got[0] != model_rank or abs(float(got[1]) - model_lost) > margin):
        raise CheckFailed(f"真实的 {len(STRAGGLER_SHARDS)} 个 Rank（Shard {label}，每单位 {1e3 * s:g} ms）：应当是 "
                          f"rank {model_rank}、约 {1e3 * model_lost:.0f} ms（误差上限 ±{1e3 * margin:.0f} ms），"
                          f"你的函数给出 {got!r}。")
    passed(f"find_straggler 在 30 组带一次意外卡顿的随机记录上都对；真实的 Shard {label} 上找出 rank {got[0]}，"
           f"每步多花 {1e3 * float(got[1]):.0f} ms（模型 {1e3 * model_lost:.0f} ms）。")

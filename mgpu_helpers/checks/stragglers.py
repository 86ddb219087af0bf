"""Checkers for ex08: the performance model and stragglers."""
from __future__ import annotations

import math
import random

from mgpu_helpers.checks.core import CheckFailed, call, is_number, passed


def check_ring_allreduce_seconds(fn) -> None:
    """``fn(nbytes, world_size, alpha, beta)``: the ring all-reduce cost of notebook 08 (0 for one rank)."""
    from mgpu_helpers.lessons import cost_model

    what = "ring_allreduce_seconds 要给出环形 All-Reduce 的 alpha-beta 代价"
    rng = random.Random()
    cases = [(1 << 30, 1, 5e-6, 1e-11), (1 << 30, 2, 5e-6, 1e-11), (1 << 20, 8, 5e-6, 1e-11)]
    cases += [(rng.randint(1, 1 << 32), rng.randint(1, 16), rng.uniform(1e-6, 5e-5), rng.uniform(1e-12, 1e-9))
              for _ in range(50)]
    for nbytes, n, alpha, beta in cases:
        got = call(fn, what, nbytes, n, alpha, beta)
        want = cost_model.ring_allreduce_seconds(nbytes, n, alpha, beta)
        if got is None or not math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-15):
            lat, bw = 2 * (n - 1) * alpha, 2 * (n - 1) / n * nbytes * beta
            raise CheckFailed(f"nbytes = {nbytes}，world_size = {n}，alpha = {alpha:.3g} s，beta = {beta:.3g} s/B："
                              f"应当是 {want:.6g} s（延迟项 {lat:.6g} + 带宽项 {bw:.6g}），实际得到 {got!r}。")
    passed(f"ring_allreduce_seconds 在 {len(cases)} 组 (nbytes, n, alpha, beta) 上与模型一致。")


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
        got = call(fn, what, list(shards), list(seconds))
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
    passed(f"rebalance 在 {len(cases)} 组随机的分片和速度上，都让最慢的 Rank 和最优整数分法一样快。")


def traced_run(shard_units, steps: int, seconds_per_unit, what: str):
    """The deterministic-cost straggler step on real ranks (RankResults), for a checker that measures; a rank
    that fails or hangs becomes a CheckFailed that says so."""
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.measure import straggler

    try:
        return straggler.run_traced(shard_units, steps=steps, seconds_per_unit=seconds_per_unit, timeout=120)
    except (RankError, RankTimeout) as exc:
        raise CheckFailed(f"{what}：测量用的 Rank 没有跑完（{type(exc).__name__}）：{str(exc).splitlines()[0]}") from None


# The number-first exercise: the learner predicts a wait, the ranks measure it with the deterministic workload.
WAIT_SHARDS = (9, 5, 5, 3)
WAIT_SECONDS_PER_UNIT = 0.020
WAIT_RANK = 3


def check_wait_prediction(fn, shard_units=WAIT_SHARDS, seconds_per_unit: float = WAIT_SECONDS_PER_UNIT,
                          rank: int = WAIT_RANK, steps: int = 5) -> None:
    """``fn() -> seconds``: the learner's prediction of how long ``rank`` waits at the all-reduce each step
    with ``shard_units`` at ``seconds_per_unit``. Runs the deterministic (sleep) straggler step on
    ``len(shard_units)`` real ranks and compares with the measured median wait, within the run's own margin
    (:func:`mgpu_helpers.measure.straggler.model_margin`) plus 10%."""
    from mgpu_helpers.measure import straggler

    what = f"predicted_wait_s 要给出 rank {rank} 每步在 All-Reduce 前等待的秒数"
    guess = call(fn, what)
    if not is_number(guess):
        raise CheckFailed(f"{what}：应当返回一个数（秒），实际得到 {guess!r}。")
    res = traced_run(shard_units, steps, seconds_per_unit, what)
    measured = straggler.median_waits(res.values)[rank]
    margin = straggler.model_margin(res.values, seconds_per_unit)
    tolerance = margin + 0.1 * measured + 1e-3
    shards = "/".join(f"{u:g}" for u in shard_units)
    if abs(float(guess) - measured) > tolerance:
        raise CheckFailed(f"Shard {shards}、每单位 {1e3 * seconds_per_unit:g} ms：{len(shard_units)} 个 Rank 上量到 "
                          f"rank {rank} 每步等 {measured:.3f} s（这次运行的误差上限 ±{tolerance:.3f} s），"
                          f"你的预测是 {float(guess):.3f} s。想一想：所有 Rank 同时出发，rank {rank} 算完自己的 "
                          f"{shard_units[rank]:g} 个单位后，要等到谁算完？")
    passed(f"你预测 rank {rank} 等 {float(guess):.3f} s，{len(shard_units)} 个 Rank 上量到 {measured:.3f} s"
           f"（误差上限 ±{tolerance:.3f} s）。")

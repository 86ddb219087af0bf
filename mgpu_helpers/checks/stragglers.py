"""Checkers of notebook 08 and ex08: the performance model and stragglers, the course's own code refused."""

import math
import random
import statistics

from mgpu_helpers.checks import core
from mgpu_helpers.launcher.errors import RankError, RankTimeout
from mgpu_helpers.lessons import cost_model
from mgpu_helpers.measure import diagnose, straggler

COST_MODEL = "mgpu_helpers.lessons.cost_model"


def check_ring_allreduce_seconds(fn) -> None:
    """``fn(nbytes, world_size, alpha, beta)``: the ring all-reduce cost of notebook 08 (0 for one rank)."""
    what = "你的 ring_reduce_scatter_seconds 经 ring_allreduce_seconds（两个阶段相加）要给出环形 All-Reduce 的 alpha-beta 代价"
    rng = random.Random()
    cases = [(1 << 30, 1, 5e-6, 1e-11), (1 << 30, 2, 5e-6, 1e-11), (1 << 20, 8, 5e-6, 1e-11)]
    cases += [
        (rng.randint(1, 1 << 32), rng.randint(1, 16), rng.uniform(1e-6, 5e-5), rng.uniform(1e-12, 1e-9))
        for _ in range(50)
    ]
    for (nbytes, n, alpha, beta), got in core.answers(fn, what, cases):
        want = cost_model.ring_allreduce_seconds(nbytes, n, alpha, beta)
        if core.is_number(got) and math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-15):
            continue
        lat, bw = 2 * (n - 1) * alpha, 2 * (n - 1) / n * nbytes * beta
        one_phase, whole_buffer = (n - 1) * alpha + (n - 1) / n * nbytes * beta, lat + 2 * (n - 1) * nbytes * beta
        slips = [
            (one_phase, "这只是一个阶段：All-Reduce = Reduce-Scatter + All-Gather，两个阶段各走 world_size − 1 步。"),
            (whole_buffer, "每一步每个 Rank 只发一块，nbytes / world_size 字节，不是整个 Buffer。"),
            (2 * n * alpha + bw, "每个阶段是 world_size − 1 步，不是 world_size 步。"),
            (lat + 2 * nbytes * beta, "带宽项是 2(n−1)/n · nbytes · beta，只在 n 很大时才接近 2 · nbytes · beta。"),
        ]
        number = core.is_number(got)
        why = core.matching_hint(float(got), slips, rel_tol=1e-9, abs_tol=1e-15) if number else "要返回一个数（秒）。"
        raise core.CheckFailed(
            f"nbytes = {nbytes}，world_size = {n}，alpha = {alpha:.3g} s，beta = {beta:.3g} s/B："
            f"应当是 {want:.6g} s（延迟项 {lat:.6g} + 带宽项 {bw:.6g}），实际得到 {got!r}。{' ' + why if why else ''}"
        )
    core.passed(f"ring_allreduce_seconds 在 {len(cases)} 组 (nbytes, n, alpha, beta) 上与模型一致（含 1 个 Rank）。")


def best_rebalance(shards, seconds) -> list[int]:
    """Reference: whole units one at a time, each to the rank that would finish it first (a unit: seconds/shards)."""
    per_unit = [s / k for s, k in zip(seconds, shards)]
    new = [0] * len(shards)
    for _ in range(int(sum(shards))):
        new[min(range(len(new)), key=lambda r: ((new[r] + 1) * per_unit[r], r))] += 1
    return new


def check_rebalance(fn) -> None:
    """``fn(shards, seconds) -> new shards``: the same units, the slowest rank as fast as :func:`best_rebalance`'s."""
    what = "rebalance 要根据实测时间重新分配工作，让最慢的 Rank 尽量快"
    rng = random.Random()
    cases = [([12, 6, 4, 2], [0.12, 0.06, 0.04, 0.02])]  # equal speeds: 6/6/6/6
    for _ in range(40):
        shards = [rng.randint(1, 20) for _ in range(rng.randint(2, 6))]
        cases.append((shards, [k * rng.choice([0.01, 0.01, 0.015, 0.02, 0.03]) for k in shards]))
    for shards, seconds in cases:
        got = core.call(fn, what, list(shards), list(seconds))
        where = f"shards = {shards}，实测 {[round(s, 4) for s in seconds]} s"
        if got is None or len(got) != len(shards):
            raise core.CheckFailed(f"{where}：应当返回 {len(shards)} 个整数（每个 Rank 一个），实际得到 {got!r}。")
        if any(int(k) != k or k < 0 for k in got):
            raise core.CheckFailed(f"{where}：新的分片 {list(got)} 里有负数或小数；工作按整单位分配。")
        if sum(got) != sum(shards):
            raise core.CheckFailed(f"{where}：新的分片 {list(got)} 一共 {sum(got)} 个单位，应当还是 {sum(shards)} 个。")
        per_unit = [s / k for s, k in zip(seconds, shards)]
        times = [k * u for k, u in zip(got, per_unit)]
        best = best_rebalance(shards, seconds)
        best_max = max(k * u for k, u in zip(best, per_unit))
        worst = max(range(len(times)), key=lambda r: times[r])
        if times[worst] > best_max * (1 + 1e-9) + 1e-12:
            raise core.CheckFailed(
                f"{where}：按你的分片 {list(got)}，rank {worst} 预计要 {times[worst]:.4g} s；"
                f"最好的整数分法 {best} 让最慢的 Rank 只要 {best_max:.4g} s。"
                "每个 Rank 每单位的时间 = 实测时间 / 原来的单位数。"
            )
    core.passed(f"rebalance 在 {len(cases)} 组随机的分片和速度上，都让最慢的 Rank 和最优整数分法一样快。")


def traced_run(shard_units, steps: int, seconds_per_unit, what: str):
    """The deterministic-cost straggler step on real ranks; a rank that fails or hangs becomes a CheckFailed."""
    try:
        return straggler.run_traced(shard_units, steps=steps, seconds_per_unit=seconds_per_unit, timeout=120)
    except (RankError, RankTimeout) as exc:
        raise core.CheckFailed(
            f"{what}：测量用的 Rank 没有跑完（{type(exc).__name__}）：{str(exc).splitlines()[0]}"
        ) from None


def check_wait_prediction(fn) -> None:
    """``fn() -> seconds``: rank 0's wait per step, against the median measured on real ranks and the run's margin."""
    shards, per_unit, rank = (6, 6, 6, 6), (0.020, 0.020, 0.060, 0.020), 0  # rank 2 throttled to a third
    n, what = len(shards), f"predicted_wait_s 要给出 rank {rank} 每步在 All-Reduce 前等待的秒数"
    guess = core.call(fn, what)
    guess = core.number_answer(guess, f"{what}：应当返回一个数（秒），实际得到 {guess!r}。")
    res = traced_run(shards, 5, per_unit, what)
    measured = straggler.median_waits(res.values)[rank]
    tolerance = straggler.model_margin(res.values, per_unit) + 0.1 * measured + 1e-3
    if abs(guess - measured) > tolerance:
        nudge = "Shard 一样大，时间却不一定一样：每个 Rank 要算多久，是它的单位数乘它自己的每单位时间。"
        raise core.CheckFailed(
            f"Shard {'/'.join(f'{u:g}' for u in shards)}、每单位 {'/'.join(f'{1e3 * s:g}' for s in per_unit)} ms："
            f"{n} 个 Rank 上量到 rank {rank} 每步等 {measured:.3f} s（这次运行的误差上限 ±{tolerance:.3f} s），"
            f"你的预测是 {guess:.3f} s。{nudge if abs(guess) < 1e-3 else ''}想一想：所有 Rank 同时出发，"
            f"rank {rank} 算完自己的 {shards[rank]:g} 个单位后，要等到谁算完？"
        )
    core.passed(
        f"你预测 rank {rank} 等 {guess:.3f} s，{n} 个 Rank 上量到 {measured:.3f} s（误差上限 ±{tolerance:.3f} s）。"
    )


# -- 08: which rank is the straggler, read from the time each rank spent inside the collective ---------------
def _collective_times(rng, world_size, straggler, late_s, stalled):
    """Per rank, 5 steps' times inside the all-reduce (about 2 ms of work) when ``straggler`` arrives ``late_s`` late;
    ``stalled=(rank, step, s)``: in that step another rank was held up ``s`` and everyone else waits for it."""
    arrivals = [[late_s if r == straggler else 0.0 for r in range(world_size)] for _ in range(5)]  # per step
    if stalled is not None:
        arrivals[stalled[1]][stalled[0]] += stalled[2]
    return [[max(a) - a[r] + 0.002 * rng.uniform(0.8, 1.3) for a in arrivals] for r in range(world_size)]


def collective_cases() -> list[tuple[list, int, str]]:
    """``(collective_s per rank per step, straggler rank, what the case is)``: the fixed edge cases, then random."""
    rng = random.Random()
    drawn = [  # (world_size, straggler, late_s, stalled, story)
        (2, 0, 0.080, None, "2 个 Rank，Straggler 是 rank 0"),
        (4, 3, 0.120, None, "4 个 Rank，Straggler 是最后一个 Rank"),
        (4, 2, 0.100, (1, 0, 0.5), "4 个 Rank，Straggler 是 rank 2；第 0 步 rank 1 被别的进程耽搁了 0.5 s"),
        (8, 5, 0.060, (0, 2, 0.4), "8 个 Rank，Straggler 是 rank 5；第 2 步 rank 0 被耽搁了 0.4 s"),
    ]
    for _ in range(20):
        n = rng.randint(2, 8)
        strag = rng.randrange(n)
        stalled = None
        if rng.random() < 0.5:  # another rank held up in one step
            stalled = (rng.choice([r for r in range(n) if r != strag]), rng.randrange(5), rng.uniform(0.3, 0.8))
        drawn.append((n, strag, rng.uniform(0.03, 0.3), stalled, f"{n} 个 Rank，随机的一组"))
    return [(_collective_times(rng, n, strag, late, stalled), strag, story) for n, strag, late, stalled, story in drawn]


def reference_straggler(collective_s, noise_s: float = 0.0):
    """The rank whose median time inside the collective is shorter than every other rank's by more than
    ``noise_s`` (it arrived last: the others waited for it inside the collective); None when no single rank
    stands out that way. 08 asks it with no noise (its cases always have one), 10 with the machine's noise."""
    medians = [statistics.median(v) for v in collective_s]
    late = min(range(len(medians)), key=medians.__getitem__)
    return late if all(m - medians[late] > noise_s for r, m in enumerate(medians) if r != late) else None


# The course's own readers of these times: a fill-in that calls them has not written the reading.
COURSE_READERS = (straggler.straggler_by_collective, diagnose.medians)

# The three usual wrong readings of the time inside the collective, shared by 08 and 10.
READ_LONGEST = (
    "你选了在 Collective 里待得最久的 Rank。它待得久，是因为早到、在里面等别人："
    "最后到的那个一进去就能开始传，它的 Collective 最短。"
)
READ_ONE_STEP = "你只看了第 0 步；偶尔一步被别的进程耽搁，就会换一个 Rank 最短。看每个 Rank 各步的中位数。"
READ_SUM = "你按各步之和（或平均值）比的；有一步卡住时，和与平均值都被那一步拉高，中位数不会。"


def _straggler_reading_hints(collective_s, noise_s, got, want) -> str:
    """Every usual reading that gives ``got`` instead of ``want`` (a stalled step can fool several), said."""
    medians = [statistics.median(v) for v in collective_s]
    first_step = reference_straggler([[v[0]] for v in collective_s], noise_s)
    by_mean = reference_straggler([[statistics.fmean(v)] for v in collective_s], noise_s)
    even = 1e3 * (max(medians) - min(medians)) <= 2e3 * noise_s + 0.1  # every rank as long, within the noise
    no_one = (  # 10 only: a rank named where there is no single straggler
        "各 Rank 差不多一样长：没有谁在等谁，差别只是噪声。这时该返回 None，去查链路和拓扑，而不是硬挑一个 Rank。"
        if even
        else "不止一个 Rank 短：最短的那个并没有比**每一个**别的 Rank 都短出噪声以上。没有唯一的 Straggler 时返回 None。"
    )
    slips = [
        (want is None and got is not None, no_one),
        (
            want is not None and got is None,
            f"rank {want} 比其余每个 Rank 都短出噪声以上：别人都在等它，它就是 Straggler。",
        ),
        (got is not None and got == max(range(len(medians)), key=medians.__getitem__), READ_LONGEST),
        (got is not None and got == first_step, READ_ONE_STEP),
        (got == by_mean, READ_SUM),
    ]
    said = "".join(text for holds, text in slips if holds)
    return said or ("Rank 号从 0 开始数。" if want is not None and got == want + 1 else "")


def hold_straggler_readings(fn, what: str, cases, with_noise: bool) -> None:
    """The one check of "the straggler is the rank with the shortest time inside the collective": ``fn`` on each case
    ``(collective_s, noise_s, want, story)``; ``with_noise``: ``fn(collective_s, noise_s)`` may answer None (10), else
    ``fn(collective_s)`` names a rank (08). The caller says what passed (its name is the one progress records)."""
    if (course := core.course_code_reached(fn, COURSE_READERS, names=("medians",))) is not None:
        raise core.CheckFailed(f"{what}：调用了课程自己的 {course}；中位数自己求（statistics.median）。")
    for collective_s, noise_s, want, story in cases:
        args = ([list(c) for c in collective_s], noise_s) if with_noise else ([list(c) for c in collective_s],)
        got = core.call(fn, what, *args)
        table = "，".join(f"rank {r} {1e3 * statistics.median(c):.1f} ms" for r, c in enumerate(collective_s))
        noise = f"，噪声 {1e3 * noise_s:g} ms" if with_noise else ""
        where = f"{story}（每个 Rank 在 Collective 里的时间，各步中位数：{table}{noise}）"
        if not (core.is_rank_number(got) or with_noise and got is None):
            kind = "Rank 号（整数）或 None" if with_noise else "Rank 号（整数）"
            raise core.CheckFailed(f"{where}：应当返回一个 {kind}，实际得到 {got!r}。")
        got = None if got is None else int(got)
        if got != want:
            hints = _straggler_reading_hints(collective_s, noise_s, got, want)
            said = lambda rank: "None（没有唯一的 Straggler）" if rank is None else f"rank {rank}"
            raise core.CheckFailed(f"{where}：应当是 {said(want)}，你的答案是 {said(got)}。{hints}")


def check_straggler_from_collective(fn) -> None:
    """``fn(collective_s) -> rank`` whose median time inside the all-reduce is SHORT (the others waited)."""
    what = "straggler_from_collective 要从每个 Rank 在 Collective 里的时间找出 Straggler"
    cases = [(c, 0.0, strag, story) for c, strag, story in collective_cases()]
    hold_straggler_readings(fn, what, cases, with_noise=False)
    core.passed(
        "straggler_from_collective 在固定的边界情形和随机的几组上都找对了 Straggler（Collective 最短的那个，按中位数）。"
    )


def check_allreduce_crossover_bytes(fn) -> None:
    """``fn(world_size, alpha, beta) -> bytes`` at which a ring all-reduce's bandwidth term equals its latency term."""
    what = "allreduce_crossover_bytes 要给出带宽项等于延迟项时的消息大小（字节）"
    rng = random.Random()
    cases = [(2, 8.6e-6, 1 / 295e9), (8, 20e-6, 1 / 100e9), (3, 5e-6, 1e-10)]
    cases += [(rng.randint(2, 16), rng.uniform(1e-6, 5e-5), rng.uniform(1e-12, 1e-9)) for _ in range(30)]
    for (n, alpha, beta), got in core.answers(fn, what, cases):
        want = n * alpha / beta
        where = f"world_size = {n}，alpha = {alpha:.3g} s，1/beta = {1 / beta / 1e9:.3g} GB/s"
        got = core.number_answer(got, f"{where}：应当返回一个数（字节），实际得到 {got!r}。")
        if math.isclose(got, want, rel_tol=1e-9):
            continue
        cancel, units = "两边都有 2(n−1)：先把它约掉，再看带宽项里剩下的 1/n。", "要的是字节，不是 GB。"
        slips = [
            (
                alpha / beta,
                "alpha / beta 是一条消息 alpha + b·beta 的转折点；环上每步每个 Rank 只发 N/n 字节，n 要乘回来。",
            ),
            ((n - 1) * alpha / beta, cancel),
            (2 * (n - 1) * alpha / beta, cancel),
            (alpha / beta / n, "n 放错了一边：带宽项是 2(n−1)/n · N · beta，解出 N 时 n 到分子上。"),
            (want / 1e9, units),
            (want / 2**30, units),
        ]
        why = core.matching_hint(got, slips, rel_tol=1e-9)
        raise core.CheckFailed(f"{where}：应当是 {want:.6g} 字节，实际得到 {got:.6g}。{why}")
    core.passed(f"allreduce_crossover_bytes 在 {len(cases)} 组 (n, alpha, beta) 上都对。")


try_ring_allreduce_seconds = core.fill_in_cell(
    check_ring_allreduce_seconds,
    f"{COST_MODEL}.ring_allreduce_seconds",
    "环形 All-Reduce 的 alpha-beta 代价",
    refuse=[f"{COST_MODEL}.ring_{op}_seconds" for op in ("allreduce", "reduce_scatter", "all_gather")],
)
try_straggler_from_collective = core.fill_in_cell(
    check_straggler_from_collective, reference_straggler, "从 Collective 的时间找 Straggler", refuse=COURSE_READERS
)

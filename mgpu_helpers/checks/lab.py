"""Checkers of the lab (notebook 12, ex12): the learner's ownership check and the learner's conclusions.

Notebook 12 asks the learner to write two things. This module holds them against what was measured:

- :func:`review_ownership`: the rows the learner's ownership check returned on every rank (which shard,
  local result, all-reduced result, expected, ok) against the input itself: problems, named by rank.
- :func:`review_claims`: the learner's conclusions, written as data
  ``{"limiting": {size: "compute" | "wait" | "communicate"}, "rs_ag_over_ar": float}``, against the measured
  step rows and sweep rows; one :class:`Verdict` per claim, saying which claim the numbers contradict.

Both only report (a notebook with a first guess still runs); the ``check_*`` functions of ex12 raise
:class:`~mgpu_helpers.checks.core.CheckFailed` on the first problem instead.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from mgpu_helpers.checks.core import CheckFailed, WORLD_SIZES, call, int_values, new_rng, passed, run_on_ranks
from mgpu_helpers.measure import sizes

SEGMENTS = ("compute", "wait", "communicate")
STEP_KEYS = {"compute": "compute_us", "wait": "wait_us", "communicate": "comm_us"}
# A claimed segment still holds when it is at least this share of the largest one: closer than that, one
# run cannot tell them apart.
TOO_CLOSE = 0.75
# The RS+AG / all-reduce time ratio claimed must lie within this factor of the measured one.
RATIO_TOLERANCE = 1.15


# --------------------------------------------------------------------------------------------------------
# The ownership check.

OWNERSHIP_KEYS = ("shard", "local", "result", "expected", "ok")


def _close(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-5, abs_tol=1e-6)


def review_ownership(values, data) -> list[str]:
    """Problems in the rows of an ownership check (rank r's row is ``values[r]``), [] when there are none.

    ``data``: the global input every rank started from. A row holds ``shard = (start, stop)`` (the
    contiguous piece the rank owns), ``local`` (sum of squares over it), ``result`` (after the all-reduce),
    ``expected`` (the sum of squares over the whole input) and ``ok`` (the rank's own verdict).
    """
    data = np.asarray(data, dtype=np.float64)
    world_size, n = len(values), len(data)
    want_total = float((data ** 2).sum())
    problems = []
    owner = [[] for _ in range(n)]
    for rank, row in enumerate(values):
        if not isinstance(row, dict) or any(k not in row for k in OWNERSHIP_KEYS):
            have = sorted(row) if isinstance(row, dict) else type(row).__name__
            return [f"rank {rank} 返回的应当是一个 dict，含 {list(OWNERSHIP_KEYS)}；实际是 {have}。"]
        try:
            start, stop = (int(v) for v in row["shard"])
        except (TypeError, ValueError):
            return [f"rank {rank} 的 shard 应当是 (start, stop) 两个整数，实际是 {row['shard']!r}。"]
        if not 0 <= start <= stop <= n:
            problems.append(f"rank {rank} 的 shard ({start}, {stop}) 超出了输入的范围 0..{n}。")
            continue
        for i in range(start, stop):
            owner[i].append(rank)
        want_local = float((data[start:stop] ** 2).sum())
        if not _close(row["local"], want_local):
            problems.append(f"rank {rank}：shard ({start}, {stop}) 上的平方和应当是 {want_local:g}，"
                            f"局部结果却是 {float(row['local']):g}。")
    shared = next((i for i in range(n) if len(owner[i]) > 1), None)
    if shared is not None:
        problems.append(f"元素 {shared} 同时归 rank {owner[shared][0]} 和 rank {owner[shared][1]} 所有："
                        "每个元素只能有一个主人，否则 All-Reduce 会把它算两次。")
    orphan = next((i for i in range(n) if not owner[i]), None)
    if orphan is not None:
        problems.append(f"元素 {orphan} 不归任何 rank：所有 shard 合起来要正好是整段输入。")
    counts = [int(row["shard"][1]) - int(row["shard"][0]) for row in values]
    if shared is None and orphan is None and max(counts) - min(counts) > 1:
        problems.append(f"各 rank 拥有的元素个数是 {counts}：差得超过 1 个，最慢的 Rank 会拖住所有人。")
    for rank, row in enumerate(values):
        result, local = float(row["result"]), float(row["local"])
        if not _close(row["expected"], want_total):
            problems.append(f"rank {rank} 的期望值 expected = {float(row['expected']):g}，"
                            f"但整段输入的平方和是 {want_total:g}。")
        if not _close(result, want_total):
            why = ""
            if world_size > 1 and _close(result, local):
                why = "——这正是它自己的局部结果：All-Reduce 没有作用在这个 Buffer 上（或者读的是另一个张量）。"
            elif _close(result, world_size * want_total):
                why = f"——正好是 {world_size} 倍：每个 rank 都拿整段输入去算了。"
            problems.append(f"rank {rank} All-Reduce 之后得到 {result:g}，应当是 {want_total:g}{why}")
        if bool(row["ok"]) != _close(result, want_total):
            problems.append(f"rank {rank} 自己的判断 ok = {bool(row['ok'])}，可是结果 {result:g} "
                            f"{'确实' if _close(result, want_total) else '并不'}等于 {want_total:g}：检查要比较结果和期望值。")
    return problems


def check_ownership_check(fn, world_sizes=WORLD_SIZES) -> None:
    """``fn(rank, world_size, data) -> dict``: own a contiguous shard of ``data``, sum its squares, all-reduce,
    compare with the whole input's sum of squares; run on each world size with a fresh random input whose
    length is usually not a multiple of the world size."""
    what = "ownership_check 要取自己的 shard、算局部平方和、All-Reduce，并和期望值比较"
    rng = new_rng()
    for world_size in world_sizes:
        n = int(rng.integers(2 * world_size, 6 * world_size)) | 1     # odd: shards cannot all be equal
        data = int_values(rng, n)
        values = run_on_ranks(fn, what, world_size, [data] * world_size)
        problems = review_ownership(values, data)
        if problems:
            raise CheckFailed(f"world_size = {world_size}，输入 {n} 个元素：" + problems[0]
                              + (f"（还有 {len(problems) - 1} 处问题）" if len(problems) > 1 else ""))
    passed(f"ownership_check 在 world_size = {list(world_sizes)}、长度不整除的随机输入上：shard 不重不漏、"
           "局部结果正确，每个 rank 都得到整段的结果并如实报告。")


# --------------------------------------------------------------------------------------------------------
# The conclusions.


@dataclass(frozen=True)
class Verdict:
    """One claim, whether the measurement supports it (None: it cannot say), and the numbers behind it."""

    claim: str
    holds: bool | None
    evidence: str

    def as_dict(self) -> dict:
        word = {True: "支持", False: "与测量矛盾", None: "无法判断"}[self.holds]
        return {"claim": self.claim, "verdict": word, "evidence": self.evidence}

    def line(self) -> str:
        mark = {True: "✓", False: "✗", None: "?"}[self.holds]
        return f"{mark} {self.claim}：{self.as_dict()['verdict']}。{self.evidence}"


def _size_key(key) -> int:
    try:
        return int(key) if isinstance(key, (int, np.integer)) else sizes.parse_size(key)
    except (ValueError, TypeError):
        raise ValueError(f"结论里的规模 {key!r} 读不懂：写成字节数（1048576）或带单位（'1 MiB'、'1M'）") from None


def measured_ratio(sweep_rows) -> tuple[int, float]:
    """``(nbytes, rs_ag time / all_reduce time)`` at the largest size where both were measured."""
    times: dict = {}
    for r in sweep_rows:
        d = r.as_dict() if hasattr(r, "as_dict") else dict(r)
        times.setdefault(d["nbytes"], {})[d["op"]] = d["time_us"]
    both = sorted(n for n, t in times.items() if "rs_ag" in t and "all_reduce" in t)
    if not both:
        raise ValueError("the sweep rows hold no size with both all_reduce and rs_ag")
    n = both[-1]
    return n, times[n]["rs_ag"] / times[n]["all_reduce"]


def review_claims(claims: dict, step_rows, sweep_rows) -> list[Verdict]:
    """The learner's claims against the measured rows: one :class:`Verdict` per claim (and per size
    measured but not claimed). Raises ``ValueError`` saying how to write them when they are malformed."""
    if not isinstance(claims, dict) or "limiting" not in claims or "rs_ag_over_ar" not in claims:
        raise ValueError('结论要写成 {"limiting": {规模: "compute"/"wait"/"communicate", ...}, '
                         f'"rs_ag_over_ar": 一个数}}；现在是 {claims!r}')
    steps = {r["nbytes"]: r for r in step_rows}
    claimed = {_size_key(k): v for k, v in dict(claims["limiting"]).items()}
    out = []
    for nbytes, segment in sorted(claimed.items()):
        size = sizes.format_bytes(nbytes)
        text = f"{size} 上最大的是 {segment}"
        if segment not in SEGMENTS:
            out.append(Verdict(text, False, f"只能是 {SEGMENTS} 之一。"))
            continue
        row = steps.get(nbytes)
        if row is None:
            measured = ", ".join(sizes.format_bytes(n) for n in sorted(steps))
            out.append(Verdict(text, None, f"这个规模没有测（测过的是 {measured}）。"))
            continue
        parts = {s: row[STEP_KEYS[s]] for s in SEGMENTS}
        largest = max(parts, key=parts.get)
        numbers = "，".join(f"{s} {parts[s]:.0f} us" for s in SEGMENTS)
        if segment == largest:
            out.append(Verdict(text, True, f"测到 {numbers}。"))
        elif parts[segment] >= TOO_CLOSE * parts[largest]:
            out.append(Verdict(text, True, f"测到 {numbers}：{segment} 和最大的 {largest} 相差不到 "
                                           f"{1 - TOO_CLOSE:.0%}，一次运行分不出谁大。"))
        else:
            out.append(Verdict(text, False, f"测到 {numbers}：最大的是 {largest}，"
                                            f"是 {segment} 的 {parts[largest] / max(parts[segment], 1e-9):.1f} 倍。"))
    for nbytes in sorted(set(steps) - set(claimed)):
        out.append(Verdict(f"{sizes.format_bytes(nbytes)} 上最大的是哪一段", None, "这个规模测了，结论里还没有写。"))
    try:
        ratio = float(claims["rs_ag_over_ar"])
    except (TypeError, ValueError):
        raise ValueError(f'"rs_ag_over_ar" 要写成一个数（RS+AG 的时间是 All-Reduce 的几倍），现在是 '
                         f'{claims["rs_ag_over_ar"]!r}') from None
    nbytes, got = measured_ratio(sweep_rows)
    text = f"{sizes.format_bytes(nbytes)} 上 RS+AG 的时间是 All-Reduce 的 {ratio:.2f} 倍"
    if 1 / RATIO_TOLERANCE <= ratio / got <= RATIO_TOLERANCE:
        out.append(Verdict(text, True, f"测到 {got:.2f} 倍。"))
    else:
        hint = ""
        if ratio > 0 and abs(1 / ratio - got) <= (RATIO_TOLERANCE - 1) * got:
            hint = "你写的像是倒数（All-Reduce / RS+AG，也就是 busbw 之比）；这里问的是时间之比。"
        out.append(Verdict(text, False, f"测到 {got:.2f} 倍。{hint}"))
    return out


def print_review(verdicts) -> None:
    """One line per verdict (✓ supported, ✗ contradicted, ? cannot say)."""
    for v in verdicts:
        print(v.line())


def _synthetic_rows(rng: random.Random):
    """Step and sweep rows with a clear answer: each size's largest part at least twice the others, and
    an RS+AG / all-reduce time ratio between 1.05 and 2.5 at the largest size."""
    from mgpu_helpers.measure.sweep import SweepRow
    from mgpu_helpers.models import bandwidth

    world_size = rng.choice([2, 4, 8])
    sizes_b = sizes.sizes_between(sizes.KiB, sizes.GiB, 4)
    chosen = sorted(rng.sample(sizes_b, rng.randint(3, 5)))
    steps, sweep_rows = [], []
    for nbytes in chosen:
        top = rng.choice(SEGMENTS)
        parts = {s: rng.uniform(10, 400) for s in SEGMENTS}
        parts[top] = max(parts.values()) * rng.uniform(2.2, 6)
        total = sum(parts.values())
        steps.append({"nbytes": nbytes, "compute_us": parts["compute"], "wait_us": parts["wait"],
                      "comm_us": parts["communicate"], "step_us": total, "efficiency": parts["compute"] / total})
        ar_us = rng.uniform(20, 5000)
        ratio = rng.uniform(1.05, 2.5)
        for op, t_us in (("all_reduce", ar_us), ("rs_ag", ar_us * ratio), ("reduce_scatter", ar_us * ratio / 2),
                         ("all_gather", ar_us * ratio / 2)):
            kind = "all_reduce" if op == "rs_ag" else op
            sweep_rows.append(SweepRow(op, nbytes, t_us, nbytes / t_us / 1e3,
                                       bandwidth.busbw(kind, nbytes, t_us / 1e6, world_size) / 1e9,
                                       world_size, "nccl", 20))
    rng.shuffle(sweep_rows)
    return steps, sweep_rows


def check_lab_claims(fn, cases: int = 30) -> None:
    """``fn(step_rows, sweep_rows) -> claims``: the lab's conclusions read from the rows, on random rows
    whose answer is clear; the first claim the rows contradict is named."""
    what = "lab_claims 要从测量行里读出结论"
    rng = random.Random()
    for _ in range(cases):
        steps, sweep_rows = _synthetic_rows(rng)
        claims = call(fn, what, [dict(r) for r in steps], list(sweep_rows))
        try:
            verdicts = review_claims(claims, steps, sweep_rows)
        except ValueError as exc:
            raise CheckFailed(f"{what}：{exc}") from None
        bad = next((v for v in verdicts if v.holds is not True), None)
        if bad is not None:
            table = "；".join(f"{sizes.format_bytes(r['nbytes'])}: compute {r['compute_us']:.0f} / wait "
                             f"{r['wait_us']:.0f} / communicate {r['comm_us']:.0f} us" for r in steps)
            raise CheckFailed(f"这组测量（{table}）下，你的结论“{bad.claim}”{bad.as_dict()['verdict']}：{bad.evidence}")
    passed(f"lab_claims 在 {cases} 组随机的测量上，每条结论都与测量一致。")


# --------------------------------------------------------------------------------------------------------
# Number first: how much longer reduce-scatter + all-gather takes than one all-reduce (recorded, 2 x H200).


def check_rs_ag_slowdown(fn) -> None:
    """``fn() -> float``: the learner's number, RS+AG time / all-reduce time at 1 GiB on 2 x H200, against
    the recorded nccl-tests times (out-of-place columns of the three files); within 3%."""
    from mgpu_helpers.measure import nccltests

    what = "rs_ag_slowdown 要返回一个数：RS+AG 的时间是 All-Reduce 的几倍"
    got = call(fn, what)
    try:
        got = float(got)
    except (TypeError, ValueError):
        raise CheckFailed(f"{what}；现在返回的是 {got!r}。") from None
    rec = nccltests.recorded_split(sizes.GiB)
    want = rec["time_ratio"]
    if math.isclose(got, want, rel_tol=0.03):
        passed(f"你的 {got:.3f} 与记录的时间之比 {want:.3f} 一致（{rec['rs_ag_us']:.0f} us 对 "
               f"{rec['all_reduce_us']:.0f} us）：慢 {want - 1:.0%}，busbw 因此低 {1 - 1 / want:.0%}。")
        return
    if math.isclose(got, 1 / want, rel_tol=0.03):
        why = "这是 busbw 之比（RS+AG 的 busbw / All-Reduce 的），不是时间之比：时间之比是它的倒数。"
    elif math.isclose(got, 1 - 1 / want, rel_tol=0.05) or math.isclose(got, want - 1, rel_tol=0.05):
        why = "这是“慢了/低了百分之几”，题目要的是倍数（比 1 大的那个数）。"
    elif got < 1.0 + 2 * rec["launch_us"] / rec["all_reduce_us"]:
        why = (f"只算两次启动延迟（约 {rec['launch_us']:.0f} us，对 {rec['all_reduce_us']:.0f} us）的话差不到 "
               "1%；差距在于两半各自的 busbw 比融合的 All-Reduce 低。")
    else:
        why = "每一半的时间 = 它搬的字节 / 它自己的 busbw；两半相加，再除以 All-Reduce 的时间。"
    raise CheckFailed(f"{what}：记录的是 {want:.3f}（{rec['rs_ag_us']:.0f} us 对 {rec['all_reduce_us']:.0f} us），"
                      f"你的是 {got:.3f}。{why}")

"""Checkers of the lab (notebook 12) and of ex12. Each conclusion is held against the learner's own run
(:func:`mgpu_helpers.report.lab.lab_run`) with its own margin; the explanation opens only when all of them hold
and the free text cites two of the run's numbers."""

import math
import re
import statistics
from dataclasses import dataclass

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.checks.collectives import hold_busbw
from mgpu_helpers.models import bandwidth
from mgpu_helpers.report import nccltests, sizes

# A claimed segment still holds when it is at least this share of the largest one: closer than that, one
# run cannot tell them apart.
TOO_CLOSE = 0.75

OWNERSHIP_KEYS = ("shard", "local", "result", "expected", "ok")


def _close(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-5, abs_tol=1e-6)


def review_ownership(values, data) -> list[str]:
    """Problems in the rows of an ownership check on ``data`` (rank r's row is ``values[r]``), [] when none. A row
    holds ``shard = (start, stop)`` (the contiguous piece the rank owns), ``local`` (sum of squares over it),
    ``result`` (after the all-reduce), ``expected`` (over the whole input) and ``ok`` (the rank's own verdict)."""
    data = np.asarray(data, dtype=np.float64)
    world_size, n = len(values), len(data)
    want_total = float((data**2).sum())
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
            problems.append(
                f"rank {rank}：shard ({start}, {stop}) 上的平方和应当是 {want_local:g}，"
                f"局部结果却是 {float(row['local']):g}。"
            )
    if (shared := next((i for i in range(n) if len(owner[i]) > 1), None)) is not None:
        problems.append(
            f"元素 {shared} 同时归 rank {owner[shared][0]} 和 rank {owner[shared][1]} 所有："
            "每个元素只能有一个主人，否则 All-Reduce 会把它算两次。"
        )
    if (orphan := next((i for i in range(n) if not owner[i]), None)) is not None:
        problems.append(f"元素 {orphan} 不归任何 rank：所有 shard 合起来要正好是整段输入。")
    counts = [int(row["shard"][1]) - int(row["shard"][0]) for row in values]
    if shared is None and orphan is None and max(counts) - min(counts) > 1:
        problems.append(f"各 rank 拥有的元素个数是 {counts}：差得超过 1 个，最慢的 Rank 会拖住所有人。")
    for rank, row in enumerate(values):
        problems += _result_problems(rank, row, want_total, world_size)
    return problems


def _result_problems(rank: int, row: dict, want_total: float, world_size: int) -> list[str]:
    """What is wrong in the all-reduce half of one rank's row (``expected``, ``result``, ``ok``), either layout."""
    result, local, expected = float(row["result"]), float(row["local"]), float(row["expected"])
    problems = []
    if not _close(expected, want_total):
        problems.append(f"rank {rank} 的期望值 expected = {expected:g}，但整段输入的平方和是 {want_total:g}。")
    if not _close(result, want_total):
        own = world_size > 1 and _close(result, local)
        why = core.first_hint(
            (own, "——这正是它自己的局部结果：All-Reduce 没有作用在这个 Buffer 上（或者读的是另一个张量）。"),
            (_close(result, world_size * want_total), f"——正好是 {world_size} 倍：每个 rank 都拿整段输入去算了。"),
        )
        problems.append(f"rank {rank} All-Reduce 之后得到 {result:g}，应当是 {want_total:g}{why}")
    if bool(row["ok"]) != _close(result, want_total):
        problems.append(
            f"rank {rank} 自己的判断 ok = {bool(row['ok'])}，可是结果 {result:g} "
            f"{'确实' if _close(result, want_total) else '并不'}等于 {want_total:g}：检查要比较结果和期望值。"
        )
    return problems


def _run_ownership(fn, what: str, world_sizes, review, cyclic: bool = False) -> None:
    """``fn`` on each world size with a fresh input of odd length (the shards cannot all be equal), failing on the
    first problem ``review(values, data)`` finds. ``cyclic`` (ex12): the first input is just longer than the world
    size, and every input starts with a zero (a missing element must still show)."""
    rng = core.new_rng()
    for k, world_size in enumerate(world_sizes):
        n = world_size + 1 if cyclic and k == 0 else int(rng.integers(2 * world_size, 6 * world_size)) | 1
        data = core.int_values(rng, n)
        if cyclic:
            data[0] = 0.0
        if problems := review(core.launch_check(fn, what, world_size, [data] * world_size), data):
            more = f"（还有 {len(problems) - 1} 处问题）" if len(problems) > 1 else ""
            raise core.CheckFailed(f"world_size = {world_size}，输入 {n} 个元素：{problems[0]}{more}")


def check_ownership_check(fn, world_sizes=core.WORLD_SIZES) -> None:
    """``fn(rank, world_size, data) -> dict``: the rows :func:`review_ownership` reviews."""
    what = "ownership_check 要取自己的 shard、算局部平方和、All-Reduce，并和期望值比较"
    _run_ownership(fn, what, world_sizes, review_ownership)
    core.passed(
        f"ownership_check 在 world_size = {list(world_sizes)}、长度不整除的随机输入上：shard 不重不漏、"
        "局部结果正确，每个 rank 都得到整段的结果并如实报告。"
    )


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


def check_rs_ag_slowdown(fn) -> None:
    """Number first: ``fn() -> float``, RS+AG time / all-reduce time at 1 GiB on 2 x H200, against the recorded
    nccl-tests times (out-of-place columns of the three files); within 3%."""
    what = "rs_ag_slowdown 要返回一个数：RS+AG 的时间是 All-Reduce 的几倍"
    got = core.call(fn, what)
    got = core.number_answer(got, f"{what}；现在返回的是 {got!r}。")
    rec = nccltests.recorded_split(sizes.GiB)
    want, launch_us, ar_us = rec["time_ratio"], rec["launch_us"], rec["all_reduce_us"]
    if math.isclose(got, want, rel_tol=0.03):
        core.passed(
            f"你的 {got:.3f} 与记录的时间之比 {want:.3f} 一致（{rec['rs_ag_us']:.0f} us 对 "
            f"{ar_us:.0f} us）：慢 {want - 1:.0%}，busbw 因此低 {1 - 1 / want:.0%}。"
        )
        return
    inverse = math.isclose(got, 1 / want, rel_tol=0.03)
    percent = math.isclose(got, 1 - 1 / want, rel_tol=0.05) or math.isclose(got, want - 1, rel_tol=0.05)
    why = core.first_hint(
        (inverse, "这是 busbw 之比（RS+AG 的 busbw / All-Reduce 的），不是时间之比：时间之比是它的倒数。"),
        (percent, "这是“慢了/低了百分之几”，题目要的是倍数（比 1 大的那个数）。"),
        (
            got < 1.0 + 2 * launch_us / ar_us,
            f"只算两次启动延迟（约 {launch_us:.0f} us，"
            f"对 {ar_us:.0f} us）的话差不到 1%；差距在于两半各自的 busbw 比融合的 All-Reduce 低。",
        ),
        default="每一半的时间 = 它搬的字节 / 它自己的 busbw；两半相加，再除以 All-Reduce 的时间。",
    )
    raise core.CheckFailed(
        f"{what}：记录的是 {want:.3f}（{rec['rs_ag_us']:.0f} us 对 {ar_us:.0f} us），你的是 {got:.3f}。{why}"
    )


def _check_ownership_fill_in(fn) -> None:
    """Notebook 12's fill-in ``ownership_check``, on 3 ranks only (one launch)."""
    check_ownership_check(fn, world_sizes=(3,))


def check_rs_ag_busbw(fn) -> None:
    """``fn(nbytes, seconds, world_size) -> bytes/s``: a reduce-scatter's or all-gather's busbw, by 05's check."""
    recorded = [(3 * (1 << 20), 0.8e-3, 3), (1 << 30, 1925.64e-6, 2), (1 << 20, 1e-3, 1), (1000.0, 5e-6, 8)]
    count = hold_busbw(fn, "reduce_scatter", "rs_ag_busbw", recorded)
    core.passed(f"rs_ag_busbw 在 {count} 组（含 n = 1、2、3 和记录里 1 GiB 的 Reduce-Scatter）上都对。")


CONCLUSION_PLACEHOLDER = "✎"
CLAIM_NAMES = {
    "crossover": "通信开始压过计算的消息规模",
    "rs_ag_over_ar": "RS+AG / All-Reduce 的时间之比",
    "busbw_fraction": "busbw 达到链路峰值的几成",
    "waiting_rank": "哪个 Rank 在等",
    "wait_us": "它每步等多久（us）",
}


def facts(run) -> dict:
    """What the run says, derived the way the lab asks the learner to derive it (with the spread where it has one)."""
    steps = sorted(run["step_rows"], key=lambda r: r["nbytes"])
    ratios = [r["rs_ag"] / r["all_reduce"] for r in run["rounds"]]
    waits = [statistics.median(w) for w in run["wait_us"]]
    waiting = max(range(len(waits)), key=waits.__getitem__)
    best = max((r for r in run["sweep_rows"] if r["op"] == "all_reduce"), key=lambda r: r["nbytes"] / r["time_us"])
    top = bandwidth.busbw("all_reduce", best["nbytes"], best["time_us"] / 1e6, run["world_size"]) / 1e9
    return {
        "steps": steps,
        "ratios": ratios,
        "ratio": statistics.median(ratios),
        "waits": waits,
        "waiting_rank": waiting,
        "wait_range": (min(run["wait_us"][waiting]), max(run["wait_us"][waiting])),
        "busbw_top": top,
        "busbw_top_bytes": best["nbytes"],
        "fraction": top / run["peak_GBps"] if run.get("peak_GBps") else None,
    }


def _crossover_verdict(claim, f) -> Verdict:
    steps, size = f["steps"], sizes.format_bytes
    text = "通信开始压过计算的规模：" + ("测过的规模里没有" if claim == "none" else size(claim))
    table = "，".join(f"{size(r['nbytes'])} 计算 {r['compute_us']:.0f} / 通信 {r['comm_us']:.0f} us" for r in steps)
    clearly_over = [r["comm_us"] * TOO_CLOSE > r["compute_us"] for r in steps]
    clearly_under = [r["comm_us"] < r["compute_us"] * TOO_CLOSE for r in steps]
    if claim == "none":
        ok = not any(clearly_over)
        return Verdict(text, ok, f"测到：{table}。" + ("" if ok else "有规模上通信明显比计算长。"))
    idx = next((i for i, r in enumerate(steps) if r["nbytes"] == claim), None)
    if idx is None:
        return Verdict(text, False, f"这个规模没有测（测过的是 {', '.join(size(r['nbytes']) for r in steps)}）。")
    ok = not clearly_under[idx] and not any(clearly_over[:idx])
    why = core.first_hint(
        (clearly_under[idx], "在这个规模上通信还明显比计算短。"),
        (any(clearly_over[:idx]), "更小的规模上通信已经明显比计算长了。"),
    )
    return Verdict(text, ok, f"测到：{table}（相差不到 {1 - TOO_CLOSE:.0%} 的算分不出）。{why}")


def _claim_verdict(key: str, name: str, value, f: dict, run: dict) -> Verdict:
    """The :class:`Verdict` on one claim (``key`` of :data:`CLAIM_NAMES`), held against the run's ``facts``."""
    if key == "busbw_fraction" and f["fraction"] is None:
        return Verdict(name, None, "这台机器的链路峰值未知，这一条判断不了。")
    if value is None:
        return Verdict(name, None, "还没写（还是 None）。")
    if key == "crossover":
        if str(value).lower() == "none":
            return _crossover_verdict("none", f)
        try:
            size = int(value) if isinstance(value, (int, np.integer)) else sizes.parse_size(value)
        except (ValueError, TypeError):
            return Verdict(
                name, False, f"结论里的规模 {value!r} 读不懂：写成字节数（1048576）或带单位（'1 MiB'、'1M'）"
            )
        return _crossover_verdict(size, f)
    if key == "waiting_rank":
        w = f["waits"]
        close = min(w) >= TOO_CLOSE * max(w)
        evidence = f"各 Rank 等待的中位数 {'，'.join(f'rank {r} {x:.0f} us' for r, x in enumerate(w))}。"
        return Verdict(
            f"{name}：rank {value}",
            int(value) == f["waiting_rank"] or close,
            evidence + ("相差不到 25%，一次运行分不出谁在等。" if close else ""),
        )
    v = float(value)  # the other claims are numbers
    if key == "rs_ag_over_ar":
        lo, hi = min(f["ratios"]), max(f["ratios"])
        ok = lo * 0.98 <= v <= hi * 1.02
        hint = (
            "你写的像是倒数（All-Reduce / RS+AG）；这里问的是 RS+AG 的时间除以 All-Reduce 的时间。"
            if not ok and lo * 0.98 <= 1 / v <= hi * 1.02
            else ""
        )
        return Verdict(
            f"{name} {v:.2f}", ok, f"这次运行重复了 {len(f['ratios'])} 轮，比值在 {lo:.2f} 到 {hi:.2f} 之间。{hint}"
        )
    if key == "busbw_fraction":
        if v > 1.5:  # written as a percentage
            v /= 100
        ok = math.isclose(v, f["fraction"], rel_tol=0.10, abs_tol=0.005)
        return Verdict(
            f"{name} {v:.1%}",
            ok,
            f"最好的一档是 {sizes.format_bytes(f['busbw_top_bytes'])}，"
            f"busbw {f['busbw_top']:.3g} GB/s，峰值 {run['peak_GBps']:.3g} GB/s。" + ("" if ok else "（容差是 10%）"),
        )
    lo, hi = f["wait_range"]  # wait_us
    return Verdict(
        f"{name} {v:.0f}",
        lo * 0.75 <= v <= hi * 1.25,
        f"rank {f['waiting_rank']} 在各个规模上的等待是 {lo:.0f} 到 {hi:.0f} us。",
    )


def review_conclusions(claims: dict, run: dict) -> list[Verdict]:
    """One :class:`Verdict` per claim of :data:`CLAIM_NAMES` (``crossover``: bytes, a size string or "none"). Margins
    come from the run: the ratio within the repeats' range, the wait within that rank's per-size waits."""
    f = facts(run)
    return [_claim_verdict(key, name, claims.get(key), f, run) for key, name in CLAIM_NAMES.items()]


def _run_numbers(run) -> list[float]:
    """Every number the run measured or the lab derives from it, in the units a learner would quote."""
    f = facts(run)
    times_us = [r[k] for r in f["steps"] for k in ("compute_us", "wait_us", "comm_us")]  # quoted in us or ms
    times_us += [t for rd in run["rounds"] for t in rd.values()] + [r["time_us"] for r in run["sweep_rows"]]
    nums = times_us + [t / 1e3 for t in times_us] + [r["efficiency"] * 100 for r in f["steps"]]
    nums += f["ratios"] + [f["ratio"], (f["ratio"] - 1) * 100, f["busbw_top"]] + f["waits"] + list(f["wait_range"])
    nums += [r["busbw"] for r in run["sweep_rows"]] + [r["algbw"] for r in run["sweep_rows"]]
    if f["fraction"] is not None:
        nums += [f["fraction"], f["fraction"] * 100, run["peak_GBps"]]
    return [n for n in nums if n and n > 0]


SIZE_NUMBERS = {1, 4, 16, 32, 64, 256, 1024}
NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")  # a number standing alone, not part of a word


def cited_numbers(text: str, run) -> list[str]:
    """The numbers in ``text`` within 10% of one the run measured; bare sizes ("1 MiB", "32 KiB") do not count."""
    known = _run_numbers(run)
    words = [w for w in NUMBER.findall(text) if "." in w or int(w) not in SIZE_NUMBERS]
    return [w for w in words if any(math.isclose(float(w), k, rel_tol=0.10) for k in known)]


def conclusion_problem(conclusion, run) -> str | None:
    """Why the free-text conclusion cannot go into the report yet, or None when it can."""
    if conclusion is None or not str(conclusion).strip():
        return "my_conclusion 还没写（是 None）。"
    if CONCLUSION_PLACEHOLDER in str(conclusion):
        return "my_conclusion 还是占位的提示（带 ✎）：换成你自己的话。"
    cited = cited_numbers(str(conclusion), run)
    if len(set(cited)) < 2:
        return (
            f"my_conclusion 里能在这次运行中找到的数只有 {len(set(cited))} 个（{', '.join(cited) or '无'}）："
            "至少引用两个你测到的数（时间、比值、busbw、等待），让结论可以被检验。"
        )
    return None


def missing(verdicts, conclusion, run) -> list[str]:
    """What still stands between the lab and its report: claims not written or contradicted, the text."""
    out = [
        f"{v.claim}：{v.evidence if v.holds is None else v.as_dict()['verdict'] + '（' + v.evidence + '）'}"
        for v in verdicts
        if v.holds is not True and not (v.holds is None and "链路峰值未知" in v.evidence)
    ]
    problem = conclusion_problem(conclusion, run)
    return out + ([problem] if problem else [])


# The lab's explanation, opened once the learner's conclusions hold. It states no recorded ratio: ex12 asks
# the learner to compute it.
EXPLANATION = """\
为什么是这样（你的结论都站住了，现在可以看了）：

- 通信压过计算的那一档：计算量不随消息变，All-Reduce 的时间却是 α + 字节数 / β。小消息几乎只剩固定延迟 α，
  大到一定程度 β 那一项开始主导，通信就追上并超过了计算。这一档在哪，取决于计算有多少、链路多快，换一台机器要重测。
- RS+AG 比一次 All-Reduce 慢：两次调用多出来的启动开销，用最小消息的时间来估只有几十微秒，在大消息上解释不了差距。
  差在每一半自己的效率：单独跑的 Reduce-Scatter 和 All-Gather，busbw 都低于一次融合的 All-Reduce（2 × H200 的记录里
  也是这样：ex12 让你从记录的 busbw 算出慢多少）。一个可能的原因（这里没有测量去证实）：融合的调用让两个阶段的分块
  首尾相接地流水，拆开后第二次调用要重新填满流水线。按时间说"慢百分之几"和按 busbw 说"低百分之几"不是同一个数：
  两个比互为倒数。你这次的误差范围有多宽，说明一次测量能分辨多小的差别；CPU 上的 gloo 是另一套实现，比值不能拿去推断 GPU。
- busbw 离峰值还差的那一截：busbw 已经按算法把每条链路实际搬的字节折算进去了；剩下的差距来自协议开销、同步，
  以及消息还不够大（busbw 随消息变大而爬升，你在步骤 4 里看到了它在哪里过半）。
- 等待的那个 Rank：它不是慢的那个。慢的 Rank 最后到达 Barrier，几乎不用等；其它 Rank 早到，等的时间差不多就是两边计算之差。
  换成没有 Barrier 的真实训练，这段等待会出现在早到的 Rank 的 All-Reduce 里（10 节）。
"""


def check_conclusions(claims: dict, conclusion, run: dict) -> list[Verdict]:
    """Notebook 12's conclusions: one line per claim, then what is missing, or the explanation once nothing is."""
    verdicts = review_conclusions(claims, run)
    for v in verdicts:  # ✓ supported, ✗ contradicted, ? cannot say
        print(v.line())
    left = missing(verdicts, conclusion, run)
    if left:
        print("\n还差这些，解释先不打开：")
        for item in left:
            print(" -", item)
    else:
        print(
            f"\n通过：每条结论都和这次运行一致，my_conclusion 引用了测到的数（{', '.join(cited_numbers(conclusion, run))}）。\n"
        )
        print(EXPLANATION)
    return verdicts


def try_conclusions(claims: dict, conclusion, run: dict) -> tuple[list[Verdict], list[str]]:
    """:func:`check_conclusions`, then ``(verdicts, what must still be done before the report is written)``."""
    verdicts = check_conclusions(claims, conclusion, run)
    return verdicts, missing(verdicts, conclusion, run)


def review_cyclic(values, data) -> list[str]:
    """Problems in the rows of a round-robin ownership check: rank r must own indices r, r + n, r + 2n, ...
    (``owned``, in increasing order), with ``local``, ``result``, ``expected`` and ``ok`` as in the lab."""
    data = np.asarray(data, dtype=np.float64)
    world_size, n = len(values), len(data)
    want_total = float((data**2).sum())
    problems = []
    for rank, row in enumerate(values):
        if not isinstance(row, dict) or any(k not in row for k in ("owned", "local", "result", "expected", "ok")):
            have = sorted(row) if isinstance(row, dict) else type(row).__name__
            return [f"rank {rank} 返回的应当是一个 dict，含 owned、local、result、expected、ok；实际是 {have}。"]
        owned = [int(i) for i in row["owned"]]
        want = list(range(rank, n, world_size))
        if owned != want:
            contiguous = len(owned) > 1 and owned == list(range(owned[0], owned[0] + len(owned)))
            shifted = owned in (list(range(rank + 1, n, world_size)), list(range(rank * world_size, n, world_size)))
            why = core.first_hint(
                (sorted(owned) == want, "元素对了，顺序要从小到大。"),
                (contiguous, "这是连续的一段（实验里的做法）；这里要的是轮流分：每隔 world_size 个取一个。"),
                (shifted, "起点不对：rank r 的第一个元素是 r。"),
                default=f"rank {rank} 应当拥有下标 {rank}, {rank} + {world_size}, {rank} + 2×{world_size}, ……",
            )
            problems.append(
                f"rank {rank} 拥有的下标是 {owned[:8]}{'……' if len(owned) > 8 else ''}，"
                f"应当是 {want[:8]}{'……' if len(want) > 8 else ''}：{why}"
            )
            continue
        want_local = float((data[want] ** 2).sum())
        if not _close(row["local"], want_local):
            problems.append(
                f"rank {rank}：它那些元素的平方和应当是 {want_local:g}，局部结果却是 {float(row['local']):g}。"
            )
        problems += _result_problems(rank, row, want_total, world_size)
    return problems


def check_ownership_cyclic(fn, world_sizes=core.WORLD_SIZES) -> None:
    """ex12's ``fn(rank, world_size, data) -> dict``: the rows :func:`review_cyclic` reviews."""
    what = "ownership_cyclic 要轮流认领元素、算局部平方和、All-Reduce，并如实核对"
    from mgpu_helpers.lessons import lab as lesson

    if fn is lesson.ownership_check:
        raise core.CheckFailed(f"{what}：这是实验里连续分段的 ownership_check；这里要的是轮流分。")
    _run_ownership(fn, what, world_sizes, review_cyclic, cyclic=True)
    core.passed(
        f"ownership_cyclic 在 world_size = {list(world_sizes)}、有余数的随机输入上：每个 rank 轮流拿到自己的下标，"
        "结果正确并如实报告。"
    )


try_ownership_check = core.fill_in_cell(
    _check_ownership_fill_in, "mgpu_helpers.lessons.lab.ownership_check", "ownership_check：所有权检查"
)
try_rs_ag_busbw = core.fill_in_cell(
    check_rs_ag_busbw,
    "mgpu_helpers.lessons.lab.rs_ag_busbw",
    "rs_ag_busbw：Reduce-Scatter 与 All-Gather 的 busbw",
    refuse=["mgpu_helpers.models.bandwidth.busbw", "mgpu_helpers.models.bandwidth.bytes_sent_per_rank"],
)

"""The checkers of the lab (mgpu_helpers.checks.lab): notebook 12's fill-ins and conclusions, ex12's checkers,
the review of the ownership rows. Typical wrong answers are named, a correct answer written differently passes,
and the conclusions are held against one run with that run's margin."""

import textwrap

import numpy as np
import pytest

from mgpu_helpers import checks
from mgpu_helpers.checks import lab
from mgpu_helpers.measure.sweep import SweepRow
from mgpu_helpers.report import lab as report_mod


def _by_value(source: str, name: str):
    """A function defined from source text, travelling to ranks by value (like one defined in a cell)."""
    ns = {"__name__": "exercise_wrong_answer"}
    exec(textwrap.dedent(source), ns)
    return ns[name]


# -- rs_ag_busbw (12's fill-in: the factor of reduce-scatter and all-gather, derived) -----------------------


@pytest.mark.parametrize(
    "wrong, why",
    [
        (lambda b, s, n: b / s, "这是 algbw"),  # no factor at all
        (lambda b, s, n: b / s * 2 * (n - 1) / n, "All-Reduce 的系数"),  # all-reduce's factor
        (lambda b, s, n: b / s * (n - 1), "还要除以 n"),  # whole buffer each step
        (lambda b, s, n: b / s / n, "走 n-1 步"),  # one step only
        (lambda b, s, n: b / s * (n - 1) / n / 1e9, "不是 GB/s"),  # GB/s instead of bytes/s
    ],
    ids=["algbw", "all-reduce factor", "whole buffer per step", "one step", "GB/s"],
)
def test_rs_ag_busbw_rejects_typical_mistakes(wrong, why):
    with pytest.raises(checks.CheckFailed, match=why):
        lab.check_rs_ag_busbw(wrong)


def test_rs_ag_busbw_forgetting_one_rank_is_told_nothing_is_sent():
    def no_guard(nbytes, seconds, world_size):
        return nbytes / seconds * max(world_size - 1, 1) / world_size

    with pytest.raises(checks.CheckFailed, match="一个 Rank 时没有人可发"):
        lab.check_rs_ag_busbw(no_guard)


def test_rs_ag_busbw_refuses_the_course_formula():
    def via_library(nbytes, seconds, world_size):
        from mgpu_helpers.models import bandwidth

        return bandwidth.busbw("reduce_scatter", nbytes, seconds, world_size)

    with pytest.raises(checks.CheckFailed, match="课程自己的"):
        lab.try_rs_ag_busbw(via_library)


def test_rs_ag_busbw_accepts_an_answer_written_differently(capsys):
    def half_of_all_reduce(nbytes, seconds, world_size):
        all_reduce_bytes = 2 * nbytes * (world_size - 1) / world_size  # 05's count, both phases
        return all_reduce_bytes / 2 / seconds

    lab.try_rs_ag_busbw(half_of_all_reduce)
    assert "通过" in capsys.readouterr().out


# -- the conclusions ---------------------------------------------------------------------------------------


def _run():
    steps = [
        {"nbytes": 1024, "compute_us": 1000.0, "wait_us": 700.0, "comm_us": 100.0},
        {"nbytes": 32768, "compute_us": 1000.0, "wait_us": 650.0, "comm_us": 400.0},
        {"nbytes": 1 << 20, "compute_us": 1000.0, "wait_us": 720.0, "comm_us": 2500.0},
    ]
    for r in steps:
        r["step_us"] = r["compute_us"] + r["wait_us"] + r["comm_us"]
        r["efficiency"] = r["compute_us"] / r["step_us"]
    wait = [[700.0, 650.0, 720.0], [60.0, 50.0, 40.0]]
    rounds = [
        {"all_reduce": 2000.0, "rs_ag": 2600.0},
        {"all_reduce": 2100.0, "rs_ag": 2900.0},
        {"all_reduce": 1900.0, "rs_ag": 2500.0},
    ]
    rows = [
        SweepRow("all_reduce", n, t, n / t / 1e3, n / t / 1e3, 2, "gloo", 5)
        for n, t in ((1024, 90.0), (32768, 300.0), (1 << 20, 2000.0))
    ]
    return report_mod.lab_run(steps, wait, rounds, rows, 2.0, 2)


GOOD = {
    "crossover": "1 MiB",
    "rs_ag_over_ar": 1.35,
    "busbw_fraction": (1 << 20) / 2000.0 / 1e3 / 2.0,
    "waiting_rank": 0,
    "wait_us": 700,
}


def test_claims_derived_from_the_run_hold_and_the_explanation_opens(capsys):
    text = "1 MiB 起 All-Reduce 比计算长；RS+AG 约是 All-Reduce 的 1.35 倍；rank 0 每步等约 700 us。"
    verdicts = lab.check_conclusions(GOOD, text, _run())
    out = capsys.readouterr().out
    assert all(v.holds for v in verdicts) and "为什么是这样" in out and "通过" in out
    assert lab.missing(verdicts, text, _run()) == []
    assert lab.try_conclusions(GOOD, text, _run())[1] == []


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("crossover", "32 KiB", "通信还明显比计算短"),  # picked the size where comm grew, not where it overtook
        ("rs_ag_over_ar", 1 / 1.35, "倒数"),  # the busbw ratio
        ("waiting_rank", 1, "与测量矛盾"),  # the slow rank named as the one that waits
        ("wait_us", 50, "与测量矛盾"),  # the slow rank's own wait
        ("busbw_fraction", 0.9, "容差"),  # the link rate mistaken for what was reached
    ],
)
def test_claims_the_run_contradicts_are_named(key, value, why):
    verdicts = lab.review_conclusions(dict(GOOD, **{key: value}), _run())
    bad = [v for v in verdicts if v.holds is not True]
    assert len(bad) == 1 and (why in bad[0].evidence or why in bad[0].as_dict()["verdict"])


def test_unwritten_claims_and_placeholder_text_keep_the_explanation_closed(capsys):
    verdicts = lab.check_conclusions(dict.fromkeys(GOOD), "✎ 用自己的话写", _run())
    out = capsys.readouterr().out
    assert "为什么是这样" not in out and "还没写" in out and "占位" in out
    assert len(lab.missing(verdicts, None, _run())) == len(GOOD) + 1


def test_a_conclusion_must_cite_two_numbers_of_the_run():
    run = _run()
    assert "至少引用两个" in lab.conclusion_problem("通信在大消息上更慢，RS+AG 也更慢。", run)
    assert "至少引用两个" in lab.conclusion_problem(
        "在 1 MiB 和 32 KiB 上 RS+AG 慢了 7.5 倍。", run
    )  # sizes do not count
    assert lab.conclusion_problem("All-Reduce 用了 2000 us，rank 0 等了 700 us。", run) is None


def test_the_report_refuses_a_missing_or_placeholder_conclusion():
    for text in (None, "", "✎ 用自己的话写三到五句"):
        with pytest.raises(ValueError, match="my_conclusion"):
            report_mod.build_report("t", "s", "topo", [], [], [], {"rows": []}, [], text, {})


# -- ex12: round-robin ownership ------------------------------------------------------------------------

CONTIGUOUS = """
def contiguous(rank, world_size, data):
    import torch.distributed as dist
    n = len(data)
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    buf = (data[start:stop] ** 2).sum().reshape(1)
    local = float(buf.item())
    dist.all_reduce(buf)
    return {"owned": list(range(start, stop)), "local": local, "result": float(buf.item()),
            "expected": float((data ** 2).sum()), "ok": float(buf.item()) == float((data ** 2).sum())}
"""
OFF_BY_ONE = """
def off_by_one(rank, world_size, data):
    import torch.distributed as dist
    owned = list(range(rank + 1, len(data), world_size))
    buf = (data[owned] ** 2).sum().reshape(1)
    local = float(buf.item())
    dist.all_reduce(buf)
    return {"owned": owned, "local": local, "result": float(buf.item()), "expected": float((data ** 2).sum()),
            "ok": True}
"""
ALWAYS_OK = """
def always_ok(rank, world_size, data):
    owned = list(range(rank, len(data), world_size))
    local = float((data[owned] ** 2).sum())
    return {"owned": owned, "local": local, "result": local, "expected": float((data ** 2).sum()), "ok": True}
"""
CORRECT = """
def by_mask(rank, world_size, data):
    import torch
    import torch.distributed as dist
    idx = torch.arange(len(data))
    mask = idx % world_size == rank
    buf = (data[mask] ** 2).sum().reshape(1)
    local = float(buf.item())
    dist.all_reduce(buf)
    total = float((data ** 2).sum())
    return {"owned": idx[mask].tolist(), "local": local, "result": float(buf.item()), "expected": total,
            "ok": abs(float(buf.item()) - total) < 1e-6}
"""


@pytest.mark.parametrize(
    "source, name, why",
    [
        (CONTIGUOUS, "contiguous", "连续的一段"),
        (OFF_BY_ONE, "off_by_one", "起点不对"),
        (ALWAYS_OK, "always_ok", "All-Reduce 之后得到"),
    ],
)
def test_round_robin_ownership_rejects_typical_mistakes(source, name, why):
    with pytest.raises(checks.CheckFailed, match=why):
        lab.check_ownership_cyclic(_by_value(source, name), world_sizes=(2,))


def test_round_robin_ownership_accepts_an_answer_written_differently(capsys):
    lab.check_ownership_cyclic(_by_value(CORRECT, "by_mask"), world_sizes=(3,))
    assert "通过" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------------
# ex12's ownership check and number first.


def test_an_ownership_check_where_every_rank_claims_everything_names_the_shared_element():
    replicated = _by_value(
        """
        def replicated(rank, world_size, data):
            import torch.distributed as dist
            buf = (data ** 2).sum().reshape(1)
            local = float(buf.item())
            dist.all_reduce(buf)
            return {"shard": (0, len(data)), "local": local, "result": float(buf.item()),
                    "expected": float((data ** 2).sum()), "ok": True}
        """,
        "replicated",
    )
    with pytest.raises(
        checks.CheckFailed, match=r"world_size = 2，输入 \d+ 个元素：元素 0 同时归 rank 0 和 rank 1 所有"
    ):
        checks.check_ownership_check(replicated, world_sizes=(2,))


def test_an_ownership_check_without_the_all_reduce_is_caught_by_the_ranks_result():
    no_reduce = _by_value(
        """
        def no_reduce(rank, world_size, data):
            n = len(data)
            base, extra = divmod(n, world_size)
            start = rank * base + min(rank, extra)
            stop = start + base + (1 if rank < extra else 0)
            local = float((data[start:stop] ** 2).sum())
            expected = float((data ** 2).sum())
            return {"shard": (start, stop), "local": local, "result": local, "expected": expected,
                    "ok": local == expected}
        """,
        "no_reduce",
    )
    with pytest.raises(checks.CheckFailed, match=r"rank 0 All-Reduce 之后得到 .*这正是它自己的局部结果"):
        checks.check_ownership_check(no_reduce, world_sizes=(3,))


@pytest.mark.parametrize(
    "answer,why",
    [
        (0.840, "busbw 之比"),  # RS+AG busbw / all-reduce busbw: the inverse
        (0.19, "百分之几"),  # "19% slower" written as a number
        (1.0, "两次启动延迟"),  # only the launch latency counted
        (2.0, "每一半的时间"),  # far off: the formula's nudge
    ],
)
def test_rs_ag_slowdown_names_the_usual_confusions(answer, why):
    with pytest.raises(checks.CheckFailed, match=f"记录的是 1.191.*{why}"):
        checks.check_rs_ag_slowdown(lambda: answer)


# --------------------------------------------------------------------------------------------------------
# The lab's review of the ownership rows (no ranks).

DATA = np.arange(10, dtype=np.float32)
TOTAL = float((DATA**2).sum())  # 285


def _row(start, stop, result=TOTAL, ok=True, local=None):
    local = float((DATA[start:stop] ** 2).sum()) if local is None else local
    return {"shard": (start, stop), "local": local, "result": result, "expected": TOTAL, "ok": ok}


def test_a_correct_ownership_run_has_no_problems():
    assert lab.review_ownership([_row(0, 4), _row(4, 7), _row(7, 10)], DATA) == []


def test_a_missing_element_and_unbalanced_shards_are_named():
    problems = lab.review_ownership([_row(0, 4), _row(5, 10)], DATA)
    assert any("元素 4 不归任何 rank" in p for p in problems)
    problems = lab.review_ownership([_row(0, 8), _row(8, 10)], DATA)
    assert problems == ["各 rank 拥有的元素个数是 [8, 2]：差得超过 1 个，最慢的 Rank 会拖住所有人。"]


def test_a_check_that_cannot_fail_is_caught_by_the_result():
    problems = lab.review_ownership([_row(0, 5, result=30.0, ok=True), _row(5, 10)], DATA)
    assert any(p.startswith("rank 0 All-Reduce 之后得到 30") and "局部结果" in p for p in problems)
    assert any(p.startswith("rank 0 自己的判断 ok = True") for p in problems)


def test_a_wrong_local_result_and_a_malformed_row_are_named():
    assert lab.review_ownership([_row(0, 5, local=1.0), _row(5, 10)], DATA)[0].startswith(
        "rank 0：shard (0, 5) 上的平方和应当是 30"
    )
    assert "应当是一个 dict" in lab.review_ownership([{"shard": (0, 10)}], DATA)[0]


def test_the_course_ownership_check_answers_neither_the_fill_in_nor_ex12s_cyclic_split():
    from mgpu_helpers.lessons import lab as lesson

    with pytest.raises(checks.CheckFailed, match="课程自己的"):
        lab.try_ownership_check(lesson.ownership_check)
    with pytest.raises(checks.CheckFailed, match="轮流分"):
        checks.check_ownership_cyclic(lesson.ownership_check)

"""The checkers of notebook 10 and ex10 (mgpu_helpers.checks.diagnostics): each rejects typical wrong answers,
naming the mistake, and accepts a correct answer written differently from the worked notebook's; ex10's
number-first checker names a wrong prediction of where a hang stops, with the schedules."""

import statistics

import pytest

import mgpu_helpers as mh
from mgpu_helpers import checks
from mgpu_helpers.checks import diagnostics
from mgpu_helpers.measure import diagnose


def test_counting_collectives_from_one_is_named_with_the_schedules():
    def one_based(schedules):
        for seq in range(min(len(s) for s in schedules)):
            names = [s[seq] for s in schedules]
            if len(set(names)) > 1:
                rank = next(r for r, n in enumerate(names) if names.count(n) == 1)
                return (seq + 1, rank, names[rank])

    with pytest.raises(
        checks.CheckFailed, match=r"\d 个 Rank 的调用顺序（rank 0: .*第 #\d+ 个上 rank \d 调用 .*序号从 0 开始数"
    ):
        checks.check_predict_hang(one_based)


def test_naming_the_majority_operation_is_refused():
    def majority(schedules):
        from collections import Counter

        for seq in range(min(len(s) for s in schedules)):
            names = [s[seq] for s in schedules]
            if len(set(names)) > 1:
                common = Counter(names).most_common(1)[0][0]
                rank = next(r for r, n in enumerate(names) if n != common)
                return (seq, rank, common)

    with pytest.raises(checks.CheckFailed, match=r"应当回答 \(\d+, \d, '\w+'\)，你的回答是"):
        checks.check_predict_hang(majority)


def test_a_prediction_that_is_not_three_values_is_refused():
    with pytest.raises(checks.CheckFailed, match=r"应当返回 \(seq, rank, name\) 三个值"):
        checks.check_predict_hang(lambda schedules: 3)


# -- notebook 10's culprit: the rank that parted, read from every rank's flight-recorder dump ---------------------


def _calls(dumps):
    return {
        r: {e["collective_seq_id"]: (e["profiling_name"], e["input_sizes"]) for e in d["entries"]}
        for r, d in dumps.items()
    }


def _first_rank_that_differs_from_rank_0(dumps):
    calls = _calls(dumps)
    for seq in sorted(calls[0]):
        for r in sorted(calls):
            if calls[r].get(seq) != calls[0][seq]:
                kind = "skipped" if seq not in calls[r] else "name" if calls[r][seq][0] != calls[0][seq][0] else "size"
                return (r, seq, kind)
    return None


def _names_only(dumps):
    from collections import Counter

    calls = {r: {e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]} for r, d in dumps.items()}
    for seq in sorted(set().union(*calls.values())):
        here = {r: c.get(seq) for r, c in calls.items()}
        missing = [r for r, v in here.items() if v is None]
        if len(missing) == 1:
            return (missing[0], seq, "skipped")
        common = Counter(here.values()).most_common(1)[0][0]
        for r, v in here.items():
            if v != common:
                return (r, seq, "name")
    return None


def _list_index_as_seq(dumps):
    ans = _reference_copy(dumps)
    if ans is None:
        return None
    rank, seq, kind = ans
    seqs = [e["collective_seq_id"] for e in dumps[0]["entries"]]
    return (rank, seqs.index(seq) if seq in seqs else seq - 1, kind)


def _reference_copy(dumps):
    from collections import Counter

    calls = {
        r: {e["collective_seq_id"]: (e["profiling_name"], repr(e["input_sizes"])) for e in d["entries"]}
        for r, d in dumps.items()
    }
    for seq in sorted(set().union(*calls.values())):
        here = {r: c.get(seq) for r, c in calls.items()}
        missing = [r for r, v in here.items() if v is None]
        if len(missing) == 1:
            return (missing[0], seq, "skipped")
        common = Counter(v for v in here.values() if v is not None).most_common(1)[0][0]
        odd = [r for r, v in here.items() if v is not None and v != common]
        if odd:
            return (odd[0], seq, "name" if here[odd[0]][0] != common[0] else "size")
    return None


def _always_a_culprit(dumps):
    return _reference_copy(dumps) or (0, 1, "name")


@pytest.mark.parametrize(
    "wrong, why",
    [
        (_first_rank_that_differs_from_rank_0, r"rank 0 也可能是走岔的那个|和多数不一样"),
        (_names_only, r"input_sizes 不同：也要比较大小"),
        (_list_index_as_seq, r"entries 列表里的下标|collective_seq_id"),
        (_always_a_culprit, r"调用完全一样.*应当返回 None"),
        (lambda dumps: 7, r"应当返回 \(rank, seq, kind\) 三个值或 None"),
    ],
)
def test_culprit_names_each_typical_mistake(wrong, why):
    # every run holds rank 0 as the culprit, a size mismatch, a ring buffer that starts past 1 (most runs), no culprit
    for _ in range(5):
        with pytest.raises(checks.CheckFailed, match=why):
            diagnostics.check_culprit(wrong)


def test_culprit_may_not_hand_the_work_to_the_course():
    with pytest.raises(checks.CheckFailed, match="课程自己的"):
        diagnostics.check_culprit(lambda dumps: diagnostics.reference_culprit(dumps))


def test_culprit_accepts_an_answer_written_differently(capsys):
    def by_columns(dumps):
        ranks = sorted(dumps)
        table = {
            r: {e["collective_seq_id"]: (e["profiling_name"], e["input_sizes"]) for e in dumps[r]["entries"]}
            for r in ranks
        }
        for seq in sorted({s for t in table.values() for s in t}):
            row = [table[r].get(seq) for r in ranks]
            if row.count(None) == 1:
                return (ranks[row.index(None)], seq, "skipped")
            for r, v in zip(ranks, row):
                if len(ranks) > 2 and row.count(v) == 1:
                    other = next(w for w in row if w != v)
                    return (r, seq, "name" if v[0] != other[0] else "size")
        return None

    diagnostics.check_culprit(by_columns)
    assert "通过" in capsys.readouterr().out


def test_synthetic_dumps_have_the_shape_of_torchs_and_the_reference_reads_them():
    import random

    d = diagnostics.make_flight_dumps(3, 5, culprit=0, kind="skipped", first=3, rng=random.Random(1))
    assert set(d[1]) == {"version", "pg_config", "comm_lib_version", "pg_status", "entries"}
    assert [e["collective_seq_id"] for e in d[1]["entries"]] == [3, 4, 5]
    assert [e["collective_seq_id"] for e in d[0]["entries"]] == [3, 4]
    assert d[1]["entries"][0]["profiling_name"].startswith("gloo:") and d[1]["entries"][-1]["state"] == "scheduled"
    assert diagnostics.reference_culprit(d) == (0, 5, "skipped")
    same = diagnostics.make_flight_dumps(4, 6, rng=random.Random(2), backend="nccl")
    assert diagnostics.reference_culprit(same) is None and same[2]["entries"][-1]["state"] == "started"


def test_the_culprit_fill_in_falls_back_to_the_reference_while_unwritten(capsys):
    assert diagnostics.try_culprit(None) is diagnostics.reference_culprit


# --------------------------------------------------------------------------------------------------------
# ex10's evidence of a hang.


def test_answering_with_a_majority_rank_explains_the_evidence():
    def first_rank(evidence):
        return (0, 0, "all_reduce")

    with pytest.raises(
        checks.CheckFailed, match=r"\d 个 Rank 的证据：rank .*应当回答 \(\d, \d, .*你的回答是 \(0, 0, 'all_reduce'\)"
    ):
        checks.check_find_mismatch(first_rank)


def test_hang_evidence_reads_like_the_launchers():
    ev = checks.make_hang_evidence(4, 5, 1, "late", "all_reduce")
    assert isinstance(ev, mh.RankTimeout)
    assert [ev.collectives[r]["stuck_in"] for r in range(4)] == [
        (4, "all_reduce"),
        None,
        (4, "all_reduce"),
        (4, "all_reduce"),
    ]
    assert ev.collectives[1]["last_completed"] == (3, "broadcast") and 1 not in ev.waiting_in


# --------------------------------------------------------------------------------------------------------
# Notebook 10's fill-ins.

# -- straggler_or_none ----------------------------------------------------------------------------------


def _median_of(v):
    return statistics.median(v)


def _always_argmin(c, noise):  # never says "nobody": the slow-path reading is missing
    return min(range(len(c)), key=lambda r: _median_of(c[r]))


def _argmax(c, noise):  # the rank that waited longest
    return max(range(len(c)), key=lambda r: _median_of(c[r]))


def _by_mean(c, noise):  # a stalled step sways the mean
    mean = [sum(v) / len(v) for v in c]
    late = min(range(len(c)), key=mean.__getitem__)
    return late if all(m - mean[late] > noise for r, m in enumerate(mean) if r != late) else None


def _against_the_average(c, noise):  # shorter than the others' average, not than each of them
    med = [_median_of(v) for v in c]
    late = min(range(len(c)), key=med.__getitem__)
    others = [m for r, m in enumerate(med) if r != late]
    return late if sum(others) / len(others) - med[late] > noise else None


@pytest.mark.parametrize(
    "wrong, why",
    [
        (_always_argmin, "没有谁在等谁|返回 None"),
        (_argmax, "待得最久"),
        (_by_mean, "平均值"),
        (_against_the_average, "不止一个 Rank 短"),
        (lambda c, noise: None, "别人都在等它"),
    ],
    ids=["never None", "longest", "mean", "against the average", "always None"],
)
def test_straggler_or_none_rejects_typical_mistakes(wrong, why):
    with pytest.raises(checks.CheckFailed, match=why):
        diagnostics.check_straggler_or_none(wrong)


def test_straggler_or_none_may_not_hand_the_work_to_the_course():
    for lazy in (
        lambda c, noise: mh.measure.straggler.straggler_by_collective(c),
        lambda c, noise: mh.measure.diagnose.medians(c).index(min(mh.measure.diagnose.medians(c))),
    ):
        with pytest.raises(checks.CheckFailed, match="课程自己的"):
            diagnostics.check_straggler_or_none(lazy)


def test_straggler_or_none_accepts_an_answer_written_differently(capsys):
    def by_sorting(collective_s, noise_s):
        def median(xs):
            s = sorted(xs)
            mid = len(s) // 2
            return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2

        order = sorted(range(len(collective_s)), key=lambda r: median(collective_s[r]))
        first, second = order[0], order[1]
        return first if median(collective_s[second]) - median(collective_s[first]) > noise_s else None

    diagnostics.check_straggler_or_none(by_sorting)
    assert "通过" in capsys.readouterr().out


def test_the_fill_ins_fall_back_to_the_reference_while_unwritten(capsys):
    assert diagnostics.try_straggler_or_none(None)([[0.03], [0.001], [0.03]], 0.005) == 1
    assert diagnostics.try_straggler_or_none(None)([[0.03], [0.03], [0.03]], 0.005) is None
    assert "还没写" in capsys.readouterr().out


def test_transports_reads_the_word_after_via():
    lines = [
        "[rank 0] vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "[rank 0] vm:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "[rank 1] vm:1:1 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
        "[rank 1] NCCL INFO Connected all rings",
    ]
    assert diagnose.transports(lines) == ["P2P", "SHM"]


def test_10_and_08_read_the_straggler_with_one_reference(capsys):
    """10's straggler_or_none is 08's straggler_from_collective with a noise: one reference serves both fill-ins."""
    from mgpu_helpers.checks import stragglers

    assert diagnostics.try_straggler_or_none(None) is stragglers.try_straggler_from_collective(None)
    assert stragglers.reference_straggler([[0.03] * 3, [0.001, 0.001, 0.4], [0.03] * 3]) == 1  # a median, not a sum
    assert "还没写" in capsys.readouterr().out

"""Notebook 10's fill-ins: each checker rejects typical wrong answers, naming the mistake, and accepts a correct
answer written differently from the worked notebook's."""
import re
import statistics

import pytest

import mgpu_helpers as mh
from mgpu_helpers import checks
from mgpu_helpers.checks import diagnostics
from mgpu_helpers.measure import diagnose


# -- stuck_in --------------------------------------------------------------------------------------------

def _last_enter(lines):
    found = None
    for ln in lines:
        m = re.search(r"\[seq (\d+)\] enter (\S+)", ln)
        if m:
            found = (int(m.group(1)), m.group(2))
    return found


def _string_seq(lines):
    entered, done = {}, set()
    for ln in lines:
        if (m := re.search(r"\[seq (\d+)\] enter (\S+)", ln)):
            entered[m.group(1)] = m.group(2)
        elif (m := re.search(r"\[seq (\d+)\] done", ln)):
            done.add(m.group(1))
    left = [k for k in entered if k not in done]
    return (left[-1], entered[left[-1]]) if left else None


def _first_line_only(lines):
    m = re.search(r"\[seq (\d+)\] enter (\S+)", lines[-1])
    return (int(m.group(1)), m.group(2)) if m else None


@pytest.mark.parametrize("wrong, why", [
    (_last_enter, r"已经有 done 行了|它不在任何 Collective 里"),   # ignores the done lines
    (_string_seq, r"是字符串"),                                    # the sequence number left as text
    (_first_line_only, r"只有 enter、没有 done 的是|不在任何"),       # trusts the very last line
    (diagnose.pending, r"课程自己的"),                              # the course's own reader
])
def test_stuck_in_rejects_typical_mistakes(wrong, why):
    with pytest.raises(checks.CheckFailed, match=why):
        diagnostics.check_stuck_in(wrong)


def test_stuck_in_accepts_an_answer_written_differently(capsys):
    def backwards(lines):
        finished = set()
        for ln in reversed(lines):
            parts = ln.replace("[seq ", "").replace("]", "").split()
            if len(parts) == 3 and parts[0].isdigit():
                k, what, name = int(parts[0]), parts[1], parts[2]
                if what == "done":
                    finished.add(k)
                elif k not in finished:
                    return (k, name)
        return None

    diagnostics.check_stuck_in(backwards)
    assert "通过" in capsys.readouterr().out


# -- measured_speedup ------------------------------------------------------------------------------------

@pytest.mark.parametrize("wrong, why", [
    (lambda one, per: one / (sum(per) / len(per)), "平均"),
    (lambda one, per: one / per[0], "只看了一个 Rank"),
    (lambda one, per: max(per) / one, "倒数"),
    (lambda one, per: one / sum(per), "加起来"),
])
def test_measured_speedup_rejects_typical_mistakes(wrong, why):
    with pytest.raises(checks.CheckFailed, match=why):
        diagnostics.check_measured_speedup(wrong)


def test_measured_speedup_refuses_the_course_function():
    from mgpu_helpers.models import scaling
    with pytest.raises(checks.CheckFailed, match="课程自己的"):
        diagnostics.check_measured_speedup(lambda one, per: scaling.speedup(one, max(per)))


def test_measured_speedup_accepts_an_answer_written_differently(capsys):
    def slowest_first(one_rank_s, per_rank_step_s):
        return 1 / (sorted(per_rank_step_s)[-1] / one_rank_s)

    diagnostics.check_measured_speedup(slowest_first)
    assert "通过" in capsys.readouterr().out


# -- least_waiting ---------------------------------------------------------------------------------------

def _by(key):
    return lambda c: min(range(len(c)), key=lambda r: key(c[r]))


@pytest.mark.parametrize("wrong, why", [
    (lambda c: max(range(len(c)), key=lambda r: statistics.median(c[r])), "待得最久"),   # the "slow link" reading
    (_by(lambda v: sum(v) / len(v)), "平均值"),                                        # a stalled step sways it
    (_by(lambda v: v[0]), "第一步|平均值"),                                            # one step only
    (lambda c: min(statistics.median(v) for v in c), "整数|应当是 rank"),              # the value, not the rank
])
def test_least_waiting_rejects_typical_mistakes(wrong, why):
    with pytest.raises(checks.CheckFailed, match=why):
        diagnostics.check_least_waiting(wrong)


def test_least_waiting_may_not_hand_the_work_to_the_course():
    for lazy in (lambda c: mh.measure.straggler.straggler_by_collective(c),
                 lambda c: mh.measure.diagnose.medians(c).index(min(mh.measure.diagnose.medians(c)))):
        with pytest.raises(checks.CheckFailed, match="课程自己的"):
            diagnostics.check_least_waiting(lazy)


def test_least_waiting_accepts_an_answer_written_differently(capsys):
    def by_sorting(collective_s):
        def median(xs):
            s = sorted(xs)
            mid = len(s) // 2
            return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
        return sorted(range(len(collective_s)), key=lambda r: median(collective_s[r]))[0]

    diagnostics.check_least_waiting(by_sorting)
    assert "通过" in capsys.readouterr().out


def test_the_fill_ins_fall_back_to_the_reference_while_unwritten(capsys):
    assert diagnostics.try_stuck_in(None) is diagnose.pending
    assert diagnostics.try_least_waiting(None)([[0.03], [0.001], [0.03]]) == 1
    assert diagnostics.try_measured_speedup(None)(0.4, [0.1, 0.2]) == pytest.approx(2.0)
    assert "还没写" in capsys.readouterr().out


def test_transports_reads_the_word_after_via():
    lines = ["[rank 0] vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
             "[rank 0] vm:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
             "[rank 1] vm:1:1 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
             "[rank 1] NCCL INFO Connected all rings"]
    assert diagnose.transports(lines) == ["P2P", "SHM"]

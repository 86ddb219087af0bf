"""Time limits on the learner's code (mgpu_helpers.checks.core.limits): every checker's call of the answer is
limited, so an endless answer fails within seconds naming its line; limits nest, each firing at its own time
and reported as its own; none is left armed afterwards."""

import signal
import time

import pytest

import mgpu_helpers as mh
from mgpu_helpers.checks.core import CheckFailed, call, deadline


def endless(*args):
    while True:
        pass


@pytest.mark.parametrize("check", ["check_rebalance", "check_step_seconds", "check_find_straggler"])
def test_an_endless_answer_fails_within_seconds_naming_its_line(check):
    start = time.monotonic()
    with pytest.raises(CheckFailed, match=r"endless\(.*\) 过了 2 秒还没有返回，停在第 \d+ 行：while True:"):
        getattr(mh.checks, check)(endless)
    assert time.monotonic() - start < 10
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_an_inner_limit_fires_first_and_the_outer_one_still_fires_at_its_own_time():
    before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    with pytest.raises(CheckFailed, match="outer：你的函数过了 1 秒还没有算完"), deadline(1.0, "outer"):
        with pytest.raises(CheckFailed, match=r"inner：endless\(\) 过了 0.2 秒还没有返回"):
            call(endless, "inner", seconds=0.2)
        assert call(abs, "fast", -3) == 3  # a limit that ends in time leaves the outer one running
        endless()
    assert 0.9 < time.monotonic() - start < 3
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is before


def test_an_outer_limit_that_runs_out_inside_an_inner_one_is_reported_as_the_outer_one():
    start = time.monotonic()
    with pytest.raises(CheckFailed, match="outer：你的函数过了 0.3 秒还没有算完"), deadline(0.3, "outer"):
        call(endless, "inner", seconds=5)
    assert time.monotonic() - start < 2
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_stub_inside_a_limited_call_is_not_done_yet():
    def stub(n):
        raise NotImplementedError("练习：补全这里")

    with pytest.raises(CheckFailed, match="^这个练习还没有完成：求和"):
        call(stub, "求和", 1)

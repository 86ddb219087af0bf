import matplotlib

matplotlib.use("Agg")
import pytest

from mgpu_helpers.launcher.trace import Span
from mgpu_helpers.lessons import cost_model
from mgpu_helpers.measure import straggler as measured
from mgpu_helpers.widgets import straggler

UNIT_S = 0.04  # one unit of shard = 40 ms of sleep
STEPS = 4


def _sleep_run(shards):
    """The straggler step in its deterministic-cost mode: each unit of shard is UNIT_S seconds of sleep."""
    import mgpu_helpers as mh

    return mh.run_ranks(
        _sleep_step, len(shards), args=(tuple(shards),), backend="gloo", timeout=60, stream=False, quiet=True
    )


def _sleep_step(rank, world_size, shards):
    from mgpu_helpers.measure import workloads

    return workloads.straggler_step(rank, world_size, shards, grad_numel=1024, steps=STEPS, seconds_per_unit=UNIT_S)


@pytest.fixture(scope="module")
def uneven_run():
    """One 12/6/4/2 run, shared by the tests that read it (each reads its own aspect)."""
    return _sleep_run((12, 6, 4, 2))


def test_waits_follow_the_planned_shards_within_the_margin_measured_in_the_same_run(uneven_run):
    # Each unit of shard is a fixed sleep, so the plan says who waits how long: the rank with the biggest
    # shard waits 0, the others (12 - shard) units. A loaded machine only adds lateness (late wake-ups,
    # ranks leaving the barrier apart), and the run measures that bound itself (model_margin).
    shards = (12, 6, 4, 2)
    res = uneven_run
    values = res.values
    planned_wait = [(max(shards) - s) * UNIT_S for s in shards]
    margin = measured.model_margin(values, UNIT_S)
    for step in range(STEPS):
        waits = [v["wait_s"][step] for v in values]
        skew = values[0]["start_skew_s"][step]
        # What holds whatever the load: the last rank to arrive waits 0, nobody less; and a wait is the time
        # from a rank's own arrival to the last one's, so compute + wait is the same on every rank up to
        # how far apart the ranks started the step.
        assert min(waits) == 0.0 and all(w >= 0.0 for w in waits), (step, waits)
        ends = [v["compute_s"][step] + v["wait_s"][step] for v in values]
        assert max(ends) - min(ends) <= skew + 1e-6, (step, ends, skew)
        for r, v in enumerate(values):
            assert v["compute_s"][step] >= shards[r] * UNIT_S - 1e-3  # a sleep never ends early
            assert abs(v["wait_s"][step] - planned_wait[r]) <= margin + 1e-6, (r, step, v["wait_s"], margin)
    waits = measured.median_waits(values)
    assert all(abs(w - p) <= margin + 1e-6 for w, p in zip(waits, planned_wait)), (waits, margin)
    # The order, always checked: a rank with a bigger shard never waits longer than one with a smaller shard
    # by more than the run's own noise (the plan puts them 2 units or more apart the other way round).
    for big in range(4):
        for small in range(big + 1, 4):
            assert waits[big] <= waits[small] + margin + 1e-6, (big, small, waits, margin)
    # spans and returned numbers agree; the all-reduce result is the same everywhere (1+2+3+4)
    assert [sum(v["wait_s"]) for v in values] == pytest.approx(measured.wait_by_rank(res.spans), abs=1e-9)
    assert {v["result"] for v in values} == {10.0}
    assert {"compute", "wait", "communicate"} <= {s.kind for spans in res.spans for s in spans}


def test_balanced_shards_cut_the_worst_wait_by_the_planned_amount(uneven_run):
    uneven, balanced = uneven_run, _sleep_run((6, 6, 6, 6))
    worst_uneven = measured.median_worst_wait(uneven.values)
    worst_balanced = measured.median_worst_wait(balanced.values)
    margin_uneven = measured.model_margin(uneven.values, UNIT_S)
    margin_balanced = measured.model_margin(balanced.values, UNIT_S)
    assert worst_balanced <= margin_balanced + 1e-6  # planned: nobody waits
    assert worst_uneven - worst_balanced >= 10 * UNIT_S - margin_uneven - margin_balanced - 1e-6  # 10 units


def test_real_traced_run_records_consistent_spans_and_results():
    # Real compute (matmuls): how long it takes depends on the machine's load, so only what does not
    # depend on timing is asserted here; the ordering claims are checked on the sleep workload above.
    uneven = measured.run_traced((12, 6, 4, 2), steps=2)
    assert [v["shard"] for v in uneven.values] == [12, 6, 4, 2]
    assert all(w >= 0 for v in uneven.values for w in v["wait_s"])
    assert [sum(v["wait_s"]) for v in uneven.values] == pytest.approx(measured.wait_by_rank(uneven.spans), abs=1e-9)
    assert all(min(v["wait_s"][i] for v in uneven.values) == 0.0 for i in range(2))  # the last to arrive
    assert {v["result"] for v in uneven.values} == {10.0}
    kinds = {s.kind for spans in uneven.spans for s in spans}
    assert {"compute", "wait", "communicate"} <= kinds


def test_median_waits_ignore_one_stalled_step():
    # rank 1 waits 30 ms a step for rank 0, except one step where rank 0 arrived late (stalled): a sum would
    # call that step's 200 ms wait typical; the median does not.
    values = [dict(wait_s=[0.0, 0.0, 0.0, 0.0, 0.0]), dict(wait_s=[0.03, 0.03, 0.2, 0.03, 0.03])]
    assert measured.median_waits(values) == [0.0, 0.03]
    assert measured.median_worst_wait(values) == 0.03
    assert measured.median_worst_wait([dict(wait_s=[0.05, 0.0, 0.01]), dict(wait_s=[0.0, 0.02, 0.0])]) == 0.02


def test_draw_timeline_draws_one_bar_per_span_and_labels_waits():
    spans = [
        [Span("compute", "c", 0.0, 0.12), Span("wait", "w", 0.12, 0.12), Span("communicate", "a", 0.12, 0.13)],
        [Span("compute", "c", 0.0, 0.02), Span("wait", "w", 0.02, 0.12), Span("communicate", "a", 0.12, 0.13)],
    ]
    fig = straggler.draw_timeline(spans)
    ax = fig.axes[0]
    assert sum(len(c.get_paths()) for c in ax.collections) == 5  # zero-length wait of rank 0 is not drawn
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["wait 0.0 ms", "wait 100.0 ms"]
    fig2 = straggler.draw_comparison({"a": spans, "b": spans})
    assert len(fig2.axes) == 2


def test_draw_comparison_shows_the_longest_run_whole_whichever_comes_first():
    long = [[Span("compute", "c", 0.0, 0.7)], [Span("compute", "c", 0.0, 0.6)]]
    short = [[Span("compute", "c", 5.0, 5.3)], [Span("compute", "c", 5.0, 5.3)]]
    for runs in ({"long": long, "short": short}, {"short": short, "long": long}):
        fig = straggler.draw_comparison(runs)
        assert all(ax.get_xlim()[1] >= 700 for ax in fig.axes[:2]), [ax.get_xlim() for ax in fig.axes]


def test_parse_shards_accepts_slashes_and_rejects_nonsense():
    assert straggler.parse_shards("12/6/4/2") == (12, 6, 4, 2)
    with pytest.raises(ValueError):
        straggler.parse_shards("12/-1")
    with pytest.raises(ValueError):
        straggler.parse_shards("")


def test_show_straggler_builds_controls():
    box = straggler.show_straggler(measured.run_traced)
    assert box.children[0].children[0].value == "12/6/4/2"


def test_compute_units_is_deterministic_and_bounded():
    import torch

    from mgpu_helpers.measure import workloads

    cpu = torch.device("cpu")
    a = workloads.compute_units(1, cpu, m=16, per_unit=50)
    b = workloads.compute_units(1, cpu, m=16, per_unit=50)
    assert torch.equal(a, b)
    assert torch.allclose(a, torch.full((4,), 2.0))  # y <- 0.5 y + 1 converges to 2
    assert torch.equal(workloads.compute_units(0, cpu, m=16, seed=3), torch.full((4,), 3.0))


def test_deterministic_run_matches_the_straggler_model_within_its_own_margin():
    # Sleeps of 15 ms per unit: the waits follow (max - own) x 15 ms, off by at most the measured margin.
    res = measured.run_traced((6, 3, 1), steps=3, seconds_per_unit=0.015)
    waits = measured.median_waits(res.values)
    predicted = cost_model.straggler_waits((6, 3, 1), 0.015)
    margin = measured.model_margin(res.values, 0.015)
    assert all(abs(w - p) <= margin + 1e-3 for w, p in zip(waits, predicted)), (waits, predicted, margin)
    assert measured.contradicted_orderings(waits, predicted, margin) == []
    assert all(len(v["start_skew_s"]) == 3 and min(v["compute_s"]) >= v["shard"] * 0.015 for v in res.values)
    step = measured.median_step_seconds(res.values)
    late = measured.step_margin(res.values, 0.015)
    assert 6 * 0.015 <= step <= 6 * 0.015 + late + max(max(v["comm_s"]) for v in res.values) + 1e-3


def test_ranks_of_different_speeds_take_one_seconds_per_unit_each():
    res = measured.run_traced((2, 2), steps=2, seconds_per_unit=(0.01, 0.03))
    margin = measured.model_margin(res.values, (0.01, 0.03))
    fast, slow = (v["compute_s"] for v in res.values)
    assert min(fast) >= 0.02 and min(slow) >= 0.06
    # per step, the gap between the two ranks is 2 x (30 - 10) ms, off by no more than the run's margin
    assert all(abs((s - f) - 0.04) <= margin + 1e-3 for f, s in zip(fast, slow)), (fast, slow, margin)


def test_model_margin_is_start_skew_plus_the_spread_of_late_wake_ups():
    values = [
        dict(shard=4, compute_s=[0.041, 0.040], wait_s=[0.0, 0.0], start_skew_s=[0.002, 0.001]),
        dict(shard=2, compute_s=[0.020, 0.025], wait_s=[0.02, 0.015], start_skew_s=[0.002, 0.001]),
    ]
    # step 0: skew 2 ms + late (1 ms, 0 ms) spread 1 ms = 3 ms; step 1: 1 ms + (0, 5 ms) spread = 6 ms
    assert measured.model_margin(values, 0.010) == pytest.approx(0.006)
    assert measured.model_margin(values, [0.010, 0.010]) == pytest.approx(0.006)
    # the step can be longer still by the latest wake-up: step 0: 2 ms + 1 ms, step 1: 1 ms + 5 ms
    assert measured.step_margin(values, 0.010) == pytest.approx(0.006)
    with pytest.raises(ValueError, match="seconds_per_unit"):
        measured.model_margin(values, None)


def test_contradicted_orderings_only_judges_gaps_wider_than_twice_the_margin():
    predicted = [0.0, 0.06, 0.08]
    assert measured.contradicted_orderings([0.0, 0.06, 0.081], predicted, 0.005) == []
    assert measured.contradicted_orderings([0.0, 0.09, 0.08], predicted, 0.005) == [(2, 1)]
    assert measured.contradicted_orderings([0.0, 0.09, 0.08], predicted, 0.02) == []  # 20 ms gap < 2 x 20 ms


def test_sleep_units_sleeps_at_least_the_units_asked_and_refuses_negative_ones():
    import time

    from mgpu_helpers.measure import workloads

    t0 = time.monotonic()
    workloads.sleep_units(3, 0.01)
    assert time.monotonic() - t0 >= 0.03
    with pytest.raises(ValueError, match=">= 0"):
        workloads.sleep_units(-1, 0.01)
    with pytest.raises(ValueError, match="shard size"):
        measured.run_traced(())


def test_noise_floor_is_the_balanced_runs_worst_wait():
    balanced = [dict(wait_s=[0.001, 0.0, 0.004]), dict(wait_s=[0.0, 0.002, 0.0])]
    assert measured.noise_floor(balanced) == measured.median_worst_wait(balanced) == 0.002

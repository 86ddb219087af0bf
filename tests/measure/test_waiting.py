"""Waiting inside the collective: without the timestamp barrier, the early ranks' all-reduce holds their
waiting, and the straggler is the rank whose collective is short.

The compute is the deterministic-cost sleep, so who waits how long is known in advance; every comparison
below uses a margin measured in the same run (start skew, late wake-ups, the all-reduce itself), never a
wall-clock constant.
"""

import statistics

import pytest

from mgpu_helpers.measure import straggler

UNIT_S = 0.030
SHARDS = (3, 3, 9, 3)  # rank 2 is the straggler: the others wait 6 units = 180 ms inside the all-reduce
STRAGGLER = 2
STEPS = 4


@pytest.fixture(scope="module")
def run():
    return straggler.run_waiting_inside(SHARDS, steps=STEPS, seconds_per_unit=UNIT_S, grad_numel=1024, timeout=90)


def test_no_wait_span_is_recorded_only_compute_and_the_collective(run):
    kinds = {s.kind for spans in run.spans for s in spans}
    assert kinds == {"compute", "communicate"}
    assert all(v["timestamp_barrier"] is False and len(v["comm_s"]) == STEPS for v in run.values)


def test_the_time_inside_the_collective_holds_the_waiting_on_every_rank_and_step(run):
    # The all-reduce cannot finish before the last rank arrived: on the same clock, every rank's time inside
    # it is at least its wait (last arrival minus own arrival), whatever the machine's load.
    for v in run.values:
        for comm, wait in zip(v["comm_s"], v["wait_s"]):
            assert comm >= wait - 1e-4, (v["rank"], v["comm_s"], v["wait_s"])


def test_the_early_ranks_collective_matches_the_model_within_the_runs_margin(run):
    margin = straggler.collective_margin(run.values, UNIT_S)
    medians = straggler.median_collective(run.values)
    for r, (units, med) in enumerate(zip(SHARDS, medians)):
        planned = (max(SHARDS) - units) * UNIT_S
        assert planned - margin - 1e-3 <= med <= planned + margin + 1e-3, (r, medians, margin)


def test_the_straggler_is_the_rank_with_the_short_collective(run):
    medians = straggler.median_collective(run.values)
    margin = straggler.collective_margin(run.values, UNIT_S)
    gap = (max(SHARDS) - sorted(SHARDS)[-2]) * UNIT_S
    if gap <= 2 * margin:  # the run itself says it cannot tell (a machine far busier than any seen)
        pytest.skip(f"this run's margin {margin:.3f} s is too large for a {gap:.3f} s gap")
    assert straggler.straggler_by_collective([v["comm_s"] for v in run.values]) == STRAGGLER
    assert all(medians[r] - medians[STRAGGLER] > gap - 2 * margin for r in range(len(SHARDS)) if r != STRAGGLER)


def test_reading_by_median_ignores_one_stalled_step():
    late = [[0.1, 0.1, 0.1, 0.1], [0.004, 0.9, 0.004, 0.004], [0.5, 0.002, 0.1, 0.1]]
    assert straggler.straggler_by_collective(late) == 1
    assert straggler.straggler_by_collective([statistics.median(c) for c in late]) == 1


def test_the_barrier_run_keeps_its_wait_span_and_a_short_collective():
    res = straggler.run_traced((1, 4), steps=2, seconds_per_unit=UNIT_S, grad_numel=256)
    assert {"compute", "wait", "communicate"} <= {s.kind for spans in res.spans for s in spans}
    margin = straggler.collective_margin(res.values, UNIT_S)
    # With the timestamp barrier the waiting is spent before the all-reduce: rank 0's collective is short.
    assert statistics.median(res.values[0]["comm_s"]) < 3 * UNIT_S - margin


# -- the dials timeline (08): waiting drawn inside the early ranks' collective ----------------------------------


def test_the_model_run_puts_the_waiting_inside_every_collective_but_the_slow_ranks():
    from mgpu_helpers.widgets import straggler as widget

    spans, waits = widget.model_run(world_size=3, compute_ms=100, comm_ms=20, late_ms=50, slow_rank=1, steps=2)
    for r in range(3):
        comms = [s for s in spans[r] if s.kind == "communicate"]
        assert [round(1e3 * s.seconds) for s in comms] == ([20, 20] if r == 1 else [70, 70])
        assert [round(1e3 * w) for w in waits[r]] == ([0, 0] if r == 1 else [50, 50])
    assert {s.kind for sp in spans for s in sp} == {"compute", "communicate"}
    with pytest.raises(ValueError, match="slow_rank"):
        widget.model_run(world_size=2, slow_rank=2)


def test_the_dials_figure_hatches_the_waiting_and_labels_each_rank():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mgpu_helpers.widgets import straggler as widget
    from mgpu_helpers.widgets import style

    for projection in (False, True):
        style.set_projection(projection)
        fig = widget.draw_dials(world_size=4, compute_ms=100, comm_ratio=0.5, late_ms=80, slow_rank=2)
        ax = fig.axes[0]
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 3 * 2  # three early ranks, two steps
        texts = [t.get_text() for t in ax.texts]
        assert texts == ["in all-reduce 130 ms", "in all-reduce 130 ms", "in all-reduce 50 ms", "in all-reduce 130 ms"]
        plt.close(fig)
    style.set_projection(False)
    assert "等待 80 ms" in widget.dial_caption(4, 100, 50, 80)


def test_the_dials_widget_builds_without_drawing():
    from mgpu_helpers.widgets import straggler as widget

    box = widget.show_dials()
    sliders = box.children[0].children
    assert [s.description for s in sliders] == ["通信 / 计算", "慢的 Rank 晚到 (ms)", "慢的是 rank"]
    assert "拖动旋钮" in box.children[1].value

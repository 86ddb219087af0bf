"""The all-reduce results widget: expected results per collective/op/pattern, and drawings that render."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
from matplotlib.figure import Figure

from mgpu_helpers.lessons import ring
from mgpu_helpers.models import collectives as ar
from mgpu_helpers.models.collectives import COLLECTIVES, REDUCE_OPS
from mgpu_helpers.runs.collectives import launch_collective, run_and_draw
from mgpu_helpers.widgets import allreduce as widget


def test_seed_example_all_reduce_of_ranks_gives_six_on_every_rank():
    inputs = ar.make_inputs("rank", 4, length=1)
    assert ar.expected_outputs("all_reduce", inputs, "sum") == [[6.0]] * 4


@pytest.mark.parametrize("op,want", [("sum", 6.0), ("avg", 1.5), ("max", 3.0), ("min", 0.0), ("prod", 0.0)])
def test_reduce_ops_on_rank_pattern(op, want):
    out = ar.expected_outputs("all_reduce", ar.make_inputs("rank", 4, 2), op)
    assert out == [[want, want]] * 4


def test_reduce_gives_only_the_root_a_result():
    out = ar.expected_outputs("reduce", ar.make_inputs("rank+1", 3, 2), "sum")
    assert out == [[6.0, 6.0], None, None]


def test_gather_all_gather_scatter_reduce_scatter_shapes_and_values():
    inputs = ar.make_inputs("random", 4, 8, seed=3)
    a = np.asarray(inputs)
    assert ar.expected_outputs("all_gather", inputs) == [a.reshape(-1).tolist()] * 4
    g = ar.expected_outputs("gather", inputs)
    assert g[0] == a.reshape(-1).tolist() and g[1:] == [None] * 3
    assert ar.expected_outputs("scatter", inputs) == [a[0, 2 * r : 2 * r + 2].tolist() for r in range(4)]
    rs = ar.expected_outputs("reduce_scatter", inputs, "sum")
    assert rs == [a.sum(0)[2 * r : 2 * r + 2].tolist() for r in range(4)]
    assert ar.expected_outputs("broadcast", inputs) == [a[0].tolist()] * 4


def test_powers_of_two_sum_names_every_rank():
    out = ar.expected_outputs("all_reduce", ar.make_inputs("powers of two", 5, 1))
    assert out[0] == [31.0]
    assert widget._label(31.0, 5) == "all" and widget._label(6.0, 5) == "1+2"


def test_one_hot_pattern_has_one_owner_per_element():
    a = np.asarray(ar.make_inputs("one-hot", 3, 6))
    assert (a.sum(axis=0) == 1).all()


def test_scatter_rejects_a_length_that_does_not_divide():
    with pytest.raises(ValueError, match="divisible"):
        ar.expected_outputs("scatter", ar.make_inputs("rank", 3, 4))


def test_unknown_pattern_op_or_collective_is_refused():
    with pytest.raises(ValueError):
        ar.make_inputs("zeros", 2)
    with pytest.raises(ValueError):
        ar.expected_outputs("all_reduce", [[1.0]], "mean")
    with pytest.raises(ValueError):
        ar.expected_outputs("all_to_all", [[1.0]])


def test_outputs_match_tells_a_wrong_rank_apart():
    want = [[6.0], None]
    assert ar.outputs_match([[6.0], None], want)
    assert not ar.outputs_match([[6.0], [6.0]], want)
    assert not ar.outputs_match([[5.0], None], want)


@pytest.mark.parametrize("name", COLLECTIVES)
def test_draw_collective_returns_a_figure_for_every_collective(name):
    n = 4
    inputs = ar.make_inputs("random", n, ar.default_length(name, n))
    fig = widget.draw_collective(name, inputs, ar.expected_outputs(name, inputs, "sum"), "sum", title="t")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    fig.canvas.draw()  # renders without a display


def test_draw_ring_steps_from_a_recorded_ring():
    n = 3
    records = []
    for r in range(n):
        x = np.full(n, float(2**r))
        steps = [("input", -1, None, None, x.copy())]
        steps.append(("reduce-scatter", 0, r, (r - 1) % n, x.copy()))
        records.append(steps)
    fig = widget.draw_ring_steps(records)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    fig.canvas.draw()


def test_the_reference_knows_the_reduce_ops_of_notebook_05():
    assert REDUCE_OPS == ring.REDUCE_OPS


def test_every_reduce_op_is_known_to_the_widget():
    inputs = ar.make_inputs("rank+1", 2, 2)
    for op in REDUCE_OPS:
        assert len(ar.expected_outputs("all_reduce", inputs, op)) == 2


@pytest.mark.parametrize("name", COLLECTIVES)
def test_real_ranks_give_the_expected_outputs(name):
    fig, run = run_and_draw(name, 4, "random", "sum", backend="gloo")
    assert run.ok, (name, run.inputs, run.outputs)
    assert isinstance(fig, Figure) and run.backend == "gloo"


def _every_case(rank, world_size, cases):
    """Rank function: each ``(name, inputs, op)`` of ``cases`` in turn, in one launch."""
    from mgpu_helpers.runs.collectives import collective_rank_fn

    return [collective_rank_fn(rank, world_size, name, inputs, op) for name, inputs, op in cases]


def test_real_ranks_give_the_expected_outputs_for_every_reduce_op():
    """Every op of every reducing collective, on 4 real ranks: one launch for all of them."""
    from mgpu_helpers.launcher.launch import run_ranks
    from mgpu_helpers.models.collectives import REDUCING

    cases = [
        (name, ar.make_inputs("random" if op != "prod" else "rank+1", 4, ar.default_length(name, 4)), op)
        for name in REDUCING
        for op in REDUCE_OPS
    ]
    res = run_ranks(_every_case, 4, args=(cases,), backend="gloo", stream=False, quiet=True)
    for k, (name, inputs, op) in enumerate(cases):
        got = [per_rank[k] for per_rank in res.values]
        assert ar.outputs_match(got, ar.expected_outputs(name, inputs, op)), (name, op, inputs, got)


def test_a_wrong_collective_output_is_reported_not_ok():
    run = launch_collective("all_reduce", 2, "rank+1", "sum", backend="gloo")
    assert run.ok and run.outputs == [[3.0] * 4] * 2
    with pytest.raises(ValueError, match="unknown collective"):
        launch_collective("all_to_all", 2)


def test_widgets_only_draw_the_launching_runner_lives_in_runs():
    assert not hasattr(widget, "run_and_draw") and not hasattr(widget, "run_ranks")
    assert not hasattr(widget, "expected_outputs")


def test_show_allreduce_reports_a_mismatch_from_its_runner(capsys):
    import ipywidgets

    class Wrong:
        ok = False

    def runner(name, world_size, pattern, op):
        inputs = ar.make_inputs(pattern, world_size)
        return widget.draw_collective(name, inputs, inputs, op), Wrong()

    box = widget.show_allreduce(runner, world_size=2)
    button = [w for row in box.children[:2] for w in row.children if isinstance(w, ipywidgets.Button)][0]
    button.click()
    assert "MISMATCH" in capsys.readouterr().out


def test_show_allreduce_run_button_runs_real_ranks_and_reenables(capsys):
    import ipywidgets

    box = widget.show_allreduce(run_and_draw, world_size=2, name="all_reduce", pattern="rank+1", op="sum")
    assert isinstance(box, ipywidgets.VBox)
    buttons = [w for row in box.children[:2] for w in row.children if isinstance(w, ipywidgets.Button)]
    assert len(buttons) == 1
    buttons[0].click()
    assert not buttons[0].disabled
    assert "matches the expected result" in capsys.readouterr().out


# -- step by step: RS + AG against one all-reduce ---------------------------------------------------------------

from mgpu_helpers.models import collective_steps  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_ring_steps_end_with_every_chunk_summing_every_rank(n):
    steps = collective_steps.ring_all_reduce_steps(n)
    assert len(steps.frames) == 1 + 2 * (n - 1)
    full = frozenset(range(n))
    assert all(c == full for row in steps.frames[-1].holds for c in row)
    assert steps.frames[-1].sent[0] == pytest.approx(2 * (n - 1) / n)  # the all-reduce's bytes, as S


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_after_the_reduce_scatter_half_each_rank_owns_exactly_its_chunk(n):
    steps = collective_steps.ring_all_reduce_steps(n)
    frame = steps.frames[steps.rs_done]
    full = frozenset(range(n))
    for r in range(n):
        assert [c for c, s in enumerate(frame.holds[r]) if s == full] == [r]
    assert frame.sent[0] == pytest.approx((n - 1) / n)


def test_ring_steps_follow_the_bandwidth_optimal_schedule():
    # at reduce-scatter step s, rank r receives chunk (r - s - 2) % n from rank r - 1
    steps = collective_steps.ring_all_reduce_steps(4)
    assert steps.frames[1].received == tuple((r - 2) % 4 for r in range(4))
    assert steps.frames[1].holds[1][3] == frozenset({0, 1})


def test_ring_steps_refuse_a_bad_world_size():
    with pytest.raises(ValueError):
        collective_steps.ring_all_reduce_steps(0)


def test_step_figures_render_and_the_split_view_keeps_only_the_own_chunk():
    steps = collective_steps.ring_all_reduce_steps(4)
    fig = widget.draw_step(steps, steps.rs_done)
    one, two = fig.axes
    assert sum(t.get_text() == "—" for t in two.texts) == 4 * 3
    assert sum(t.get_text() == "—" for t in one.texts) == 0
    fig.canvas.draw()
    big = widget.draw_rs_ag_vs_all_reduce(steps)
    assert len(big.axes) == 6
    big.canvas.draw()
    with pytest.raises(ValueError):
        widget.draw_step(steps, 99)


def test_step_captions_are_chinese_and_show_steps_moves_with_its_slider(capsys):
    steps = collective_steps.ring_all_reduce_steps(3)
    assert "Reduce-Scatter 到此结束" in widget.step_caption(steps, steps.rs_done)
    assert "1.33 × S" in widget.step_caption(steps, len(steps.frames) - 1)
    box = widget.show_steps(steps)
    box.children[0].value = 4
    assert "All-Reduce 完成" in capsys.readouterr().out

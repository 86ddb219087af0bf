import matplotlib

matplotlib.use("Agg")

from mgpu_helpers.models import memory  # noqa: E402
from mgpu_helpers.widgets import sharding  # noqa: E402


def _bar_heights(ax):
    return [round(p.get_height(), 6) for p in ax.patches]


def test_replicated_24gb_on_four_16gb_gpus_draws_four_bars_over_capacity():
    plan = memory.memory_plan("replicate", 4, 16, params=24)
    fig = sharding.draw_memory_plan(plan)
    ax = fig.axes[0]
    assert _bar_heights(ax) == [24] * 4
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("24\nOVER") == 4
    assert ax.lines[0].get_ydata()[0] == 16          # the capacity line
    assert "does not fit" in ax.get_title()
    assert "replicated" in ax.get_legend().get_texts()[0].get_text()


def test_14_10_and_12_12_both_fit_under_16gb():
    plans = {"14/10": memory.memory_plan("zero3", 2, 16, params=24, weights=(14, 10)),
             "12/12": memory.memory_plan("zero3", 2, 16, params=24, weights=(12, 12))}
    fig = sharding.draw_plans(plans)
    assert [_bar_heights(ax) for ax in fig.axes] == [[14, 10], [12, 12]]
    assert all("OVER" not in t.get_text() for ax in fig.axes for t in ax.texts)
    assert plans["12/12"].imbalance < plans["14/10"].imbalance


def test_describe_lists_each_rank_and_what_is_replicated():
    plan = memory.memory_plan("data_parallel", 2, 24, params=4, grads=4, optimizer=8, activations=8)
    text = sharding.describe(plan)
    assert "rank 0: 20 (params 4, grads 4, optimizer 8, activations 4)" in text
    assert "replicated: params, grads, optimizer" in text and "-> fits" in text


def test_show_sharding_redraws_when_a_control_changes():
    box = sharding.show_sharding()
    note = box.children[4]
    assert "replicate" in note.value
    box.children[3].value = "zero3"
    assert "zero3" in note.value


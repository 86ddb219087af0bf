import matplotlib
import pytest

matplotlib.use("Agg")

from mgpu_helpers.models import memory
from mgpu_helpers.widgets import sharding, style


def _bar_heights(ax):
    return [round(p.get_height(), 6) for p in ax.patches]


def test_replicated_24gb_on_four_16gb_gpus_draws_four_bars_over_capacity():
    plan = memory.memory_plan("replicate", 4, 16, params=24)
    fig = sharding.draw_memory_plan(plan)
    ax = fig.axes[0]
    assert _bar_heights(ax) == [24] * 4
    labels = [t.get_text() for t in ax.texts]
    over = style.zh_or_en("溢出", "OVER")  # Chinese where a CJK font is installed, else English
    assert labels.count(f"24\n{over}") == 4
    assert ax.lines[0].get_ydata()[0] == 16  # the capacity line
    assert style.zh_or_en("装不下", "does not fit") in ax.get_title()
    assert style.zh_or_en("（复制）", " (replicated)") in ax.get_legend().get_texts()[0].get_text()


def test_14_10_and_12_12_both_fit_under_16gb():
    plans = {
        "14/10": memory.memory_plan("zero3", 2, 16, params=24, weights=(14, 10)),
        "12/12": memory.memory_plan("zero3", 2, 16, params=24, weights=(12, 12)),
    }
    fig = sharding.draw_plans(plans)
    assert [_bar_heights(ax) for ax in fig.axes] == [[14, 10], [12, 12]]
    assert all(word not in t.get_text() for ax in fig.axes for t in ax.texts for word in ("OVER", "溢出"))
    assert plans["12/12"].imbalance < plans["14/10"].imbalance


def test_describe_lists_each_rank_and_what_is_replicated_in_chinese():
    plan = memory.memory_plan("data_parallel", 2, 24, params=4, grads=4, optimizer=8, activations=8)
    text = sharding.describe(plan)
    assert "rank 0：20 GB（参数 4，梯度 4，优化器状态 8，激活 4）" in text
    assert "各存一整份的：参数、梯度、优化器状态" in text and "-> 装得下" in text


def test_zero3_sends_one_and_a_half_times_data_parallel_and_zero12_as_much():
    rows = {r.strategy: r for r in memory.compare_strategies(4, 16, params=6, grads=6, optimizer=12, activations=8)}
    dp = rows["data_parallel"].step_bytes
    assert dp == 2 * 3 / 4 * 6
    assert rows["zero1"].step_bytes == rows["zero2"].step_bytes == dp
    assert rows["zero3"].step_bytes == 1.5 * dp
    assert rows["replicate"].step_bytes == 0 and rows["tensor_parallel"].step_bytes is None
    assert [s for s, r in rows.items() if r.fits] == ["tensor_parallel", "pipeline_parallel", "zero2", "zero3"]


def test_strategy_figure_draws_memory_and_bytes_for_every_strategy():
    rows = memory.compare_strategies(4, 16, params=4, grads=4, optimizer=16, activations=12)
    fig = sharding.draw_strategies(rows, "task")
    mem, sent = fig.axes
    assert [round(p.get_width(), 6) for p in mem.patches] == [r.peak for r in rows]
    assert mem.lines[0].get_xdata()[0] == 16
    labels = [t.get_text().strip() for t in sent.texts]
    assert labels.count("n/a") == 3 and "13.5" not in labels and "9" in labels and "6" in labels
    fig.canvas.draw()
    text = sharding.describe_strategies(rows)
    assert "ZeRO-3" in text and "1.5 倍" in text and "不在模型内" in text


def test_uneven_weights_reach_the_bars_and_bad_weights_are_explained():
    plan = memory.memory_plan("zero3", 2, 16, params=24, weights=sharding._weights("14, 10", 2))
    assert plan.totals == [14, 10]
    with pytest.raises(ValueError, match="要有 2 个"):
        sharding._weights("1, 2, 3", 2)
    with pytest.raises(ValueError, match="逗号"):
        sharding._weights("a, b", 2)


def test_show_sharding_states_the_goal_and_answers_only_after_the_guess(capsys):
    # Outside a kernel an Output widget lets its prints through to stdout: read them there.
    box = sharding.show_sharding(params=4, grads=4, optimizer=16, activations=12, strategy="data_parallel")
    goal, note = box.children[0], box.children[5]
    assert "目标" in goal.value and "哪些策略装得下" in goal.value
    assert "Data Parallel" in note.value
    box.children[4].value = "zero3"
    assert "ZeRO-3" in note.value
    assert "漏选的" not in capsys.readouterr().out  # nothing revealed before the button
    guess, button = box.children[7].children
    guess.value = ("zero2", "zero3")
    button.click()
    printed = capsys.readouterr().out
    assert "漏选的（其实装得下）：Pipeline Parallel、ZeRO-1" in printed and "1.5 倍" in printed
    box.children[3].children[2].value = "3, 1, 1, 1"  # uneven weights redraw the answer too
    assert "rank 0：" in capsys.readouterr().out
    box.children[3].children[2].value = "3, 1"
    assert "要有 4 个" in note.value


def _median_font_and_area(fig):
    import statistics

    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()]
    w, h = fig.get_size_inches()
    return statistics.median(sizes), w, h


@pytest.mark.parametrize("draw", ["strategies", "allreduce_steps", "allreduce_step"])
def test_task_figures_grow_in_projection_mode(draw):
    import matplotlib.pyplot as plt

    from mgpu_helpers.models import collective_steps
    from mgpu_helpers.widgets import allreduce, style

    def figure():
        if draw == "strategies":
            return sharding.draw_strategies(
                memory.compare_strategies(4, 16, params=4, grads=4, optimizer=16, activations=12)
            )
        steps = collective_steps.ring_all_reduce_steps(4)
        return allreduce.draw_rs_ag_vs_all_reduce(steps) if draw == "allreduce_steps" else allreduce.draw_step(steps, 3)

    try:
        style.set_projection(False)
        f0, w0, h0 = _median_font_and_area(figure())
        style.set_projection(True)
        f1, w1, h1 = _median_font_and_area(figure())
    finally:
        style.set_projection(False)
        plt.close("all")
    assert f1 >= 1.5 * f0 and w1 * h1 > w0 * h0
    # still larger once a browser fits the figure into a 1280 px wide notebook (about 11.5 in at 100 dpi)
    assert f1 * min(1.0, 11.5 / w1) >= 1.25 * f0 * min(1.0, 11.5 / w0)

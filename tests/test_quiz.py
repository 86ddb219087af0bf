import pytest

from mgpu_helpers.widgets import quiz

Q = quiz.Question(
    prompt="四个 Rank 都需要梯度总和并继续更新，哪种语义最直接？",
    options=("每张卡保留自己的局部梯度", "All-Reduce", "把完整数据复制四份后不通信"),
    answer=1, explanation="All-Reduce 归约并把结果分发给每个 Rank。", hint="每个 Rank 都要同一个结果。",
    wrong={0: "局部梯度各不相同，参数会分叉。"})
MULTI = quiz.Question(prompt="哪些会缩小每卡模型状态？", options=("Data Parallel", "ZeRO-3", "Tensor Parallel"),
                      answer=(1, 2), explanation="两者都切分模型状态。")


def test_right_answer_by_index_or_letter_is_accepted():
    assert quiz.check_answer(Q, 1).correct
    assert quiz.check_answer(Q, "b").correct
    assert quiz.check_answer(Q, " B. ").correct
    assert "All-Reduce 归约" in quiz.check_answer(Q, 1).message


def test_wrong_answer_explains_the_option_and_gives_the_hint():
    fb = quiz.check_answer(Q, "A")
    assert not fb.correct
    assert "参数会分叉" in fb.message and "提示：每个 Rank 都要同一个结果。" in fb.message
    assert not quiz.check_answer(Q, 2).correct


def test_no_choice_asks_to_choose():
    assert quiz.check_answer(Q, None) == quiz.Feedback(False, "请先选择一个选项。")
    assert not quiz.check_answer(MULTI, []).correct


def test_multi_answer_needs_exactly_the_right_set():
    assert quiz.check_answer(MULTI, ["B", "C"]).correct
    partial = quiz.check_answer(MULTI, ["B"])
    assert not partial.correct and "还有正确的选项没有选" in partial.message
    assert not quiz.check_answer(MULTI, [0, 1, 2]).correct


def test_unknown_option_and_bad_question_are_rejected():
    with pytest.raises(ValueError):
        quiz.check_answer(Q, "D")
    with pytest.raises(ValueError):
        quiz.check_answer(Q, 7)
    with pytest.raises(ValueError):
        quiz.Question("?", ("only one",), 0, "")
    with pytest.raises(ValueError):
        quiz.Question("?", ("a", "b"), 2, "")


def test_static_fallback_hides_the_answer_in_details():
    h = quiz.static_html(Q, 1)
    assert "<b>1.</b>" in h and "<li>B. All-Reduce</li>" in h
    assert h.index("<details><summary>参考答案</summary>") < h.index("B。All-Reduce 归约")
    assert repr(quiz.static(Q, 1)).splitlines() == [
        "1. 四个 Rank 都需要梯度总和并继续更新，哪种语义最直接？",
        "  A. 每张卡保留自己的局部梯度", "  B. All-Reduce", "  C. 把完整数据复制四份后不通信"]
    assert "参考答案" not in repr(quiz.static(Q))


def test_widget_checks_the_selected_option():
    box = quiz.show(Q, 1)
    radio, feedback = box.children[1], box.children[3]
    radio.value = radio.options[0]
    box.check(None)
    assert "还不对" in feedback.value
    radio.value = radio.options[1]
    box.check(None)
    assert "正确" in feedback.value
    multi = quiz.show(MULTI)
    multi.children[1].children[1].value = True
    multi.children[1].children[2].value = True
    multi.check(None)
    assert "正确" in multi.children[3].value

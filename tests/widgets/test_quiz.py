import pytest

from mgpu_helpers.widgets import quiz

Q = quiz.Question(
    prompt="四个 Rank 都需要梯度总和并继续更新，哪种语义最直接？",
    options=("每张卡保留自己的局部梯度", "All-Reduce", "把完整数据复制四份后不通信"),
    answer=1,
    explanation="All-Reduce 归约并把结果分发给每个 Rank。",
    hint="每个 Rank 都要同一个结果。",
    wrong={0: "局部梯度各不相同，参数会分叉。"},
)
MULTI = quiz.Question(
    prompt="哪些会缩小每卡模型状态？",
    options=("Data Parallel", "ZeRO-3", "Tensor Parallel"),
    answer=(1, 2),
    explanation="两者都切分模型状态。",
)


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


def test_static_html_folds_hint_and_answer_and_text_has_no_answer():
    h = quiz.static_html(Q, 1)
    assert "<b>1.</b>" in h and "<li>B. All-Reduce</li>" in h
    assert h.index("<details><summary>想一想之后再展开：参考答案</summary>") < h.index("B。All-Reduce 归约")
    assert "A 错在：局部梯度各不相同" in h  # the wrong-option note is folded too
    assert "All-Reduce 归约" not in quiz.static_html(Q, 1, with_answer=False)
    assert quiz.static_text(Q, 1).splitlines() == [
        "1. 四个 Rank 都需要梯度总和并继续更新，哪种语义最直接？",
        "  A. 每张卡保留自己的局部梯度",
        "  B. All-Reduce",
        "  C. 把完整数据复制四份后不通信",
    ]
    assert "All-Reduce 归约" not in quiz.static_text(Q)


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


def test_answer_opens_only_after_a_first_check():
    box = quiz.show(Q, 1)
    radio, buttons, feedback = box.children[1], box.children[2], box.children[3]
    reveal = buttons.children[2]
    assert reveal.disabled
    box.check(None)  # nothing chosen yet: still closed
    assert reveal.disabled and "请先选择" in feedback.value
    radio.value = radio.options[0]
    box.check(None)
    assert not reveal.disabled
    box.reveal(None)
    assert "参考答案：B。" in feedback.value


# --------------------------------------------------------------------------------------------------------
# The question bank of 11_review (mgpu_helpers/data/review_questions.json).

BANK = quiz.bank()
SINGLE = [q for q in BANK if not q.multiple]


def test_every_reference_answer_passes_and_every_wrong_option_is_rejected():
    assert len(BANK) >= 9
    for q in BANK:
        assert quiz.check_answer(q, sorted(q.correct)).correct, q.qid
        for i in range(len(q.options)):
            if i not in q.correct:
                fb = quiz.check_answer(q, [i] if q.multiple else i)
                assert not fb.correct, (q.qid, i)
                if i in q.wrong:
                    assert q.wrong[i] in fb.message
        assert q.hint and q.explanation and q.wrong, q.qid  # every question explains itself


def test_correct_options_are_spread_over_the_positions():
    from collections import Counter

    positions = [next(iter(q.correct)) for q in SINGLE]
    count = Counter(positions)
    assert len(count) >= 3, f"the correct options sit in only {sorted(count)}"
    assert max(count.values()) <= -(-len(SINGLE) // 3), count  # no letter holds more than a third
    relative = [p / (len(q.options) - 1) for p, q in zip(positions, SINGLE)]
    assert 0.3 <= sum(relative) / len(relative) <= 0.7  # neither early nor late on average


def test_the_correct_option_is_not_systematically_the_longest():
    longest = [
        q.qid
        for q in SINGLE
        if len(q.options[next(iter(q.correct))]) > max(len(o) for i, o in enumerate(q.options) if i not in q.correct)
    ]
    assert len(longest) <= len(SINGLE) // 3, f"the right option is the longest in {longest}"
    right = [len(q.options[i]) for q in BANK for i in q.correct]
    wrong = [len(o) for q in BANK for i, o in enumerate(q.options) if i not in q.correct]
    ratio = (sum(right) / len(right)) / (sum(wrong) / len(wrong))
    assert 0.8 <= ratio <= 1.25, f"right options average {ratio:.2f}x the length of wrong ones"


def test_ask_finds_a_question_by_id_and_numbers_it_by_its_place():
    box = quiz.ask("review-2")
    assert box.children[0].value.startswith("<p><b>2.</b> ")
    with pytest.raises(KeyError, match="known ids: review-1"):
        quiz.get("no-such-question")
    assert quiz.asked_ids("x = 1\nmh.widgets.quiz.ask(\"think-1\")\nquiz.ask( 'review-5' )") == ["think-1", "review-5"]


def test_review_notebook_source_and_outputs_hold_no_answer():
    import os

    import nbformat

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    nb = nbformat.read(os.path.join(root, "notebooks", "11_review.ipynb"), as_version=4)
    text = "\n".join(c.source + "\n" + str(c.get("outputs", "")) for c in nb.cells)
    asked = [i for c in nb.cells if c.cell_type == "code" for i in quiz.asked_ids(c.source)]
    assert sorted(asked) == sorted(q.qid for q in BANK)  # every question, once
    for c in nb.cells:
        if c.cell_type == "code":
            assert len(quiz.asked_ids(c.source)) <= 1, "one cell per question"

    def windows(t, n=12):  # runs of the text that are mostly Chinese (not shared English terms)
        runs = {t[i : i + n] for i in range(max(1, len(t) - n + 1))}
        return {w for w in runs if sum("\u4e00" <= ch <= "\u9fff" for ch in w) >= n // 2}

    for q in BANK:
        for secret in [q.explanation, *q.wrong.values()]:
            shown = [w for w in windows(secret) if w in text]
            assert not shown, (q.qid, shown[:1])  # not even a part of an answer or a note
    assert "answer=" not in text and "answer " not in text

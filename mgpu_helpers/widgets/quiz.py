"""Review questions that check the reader's answer and give hints, with a static fallback.

- :class:`Question`: the prompt, options, the correct option(s), a hint, the explanation, and optional
  feedback for particular wrong options.
- :func:`check_answer`: pure; takes an option index, a letter ("B"), or several for multi-answer questions,
  returns :class:`Feedback`.
- :func:`static`: an object that renders as HTML (question, options, hint and answer folded in ``<details>``)
  and as plain text: it shows without a kernel (static HTML, GitHub) and its output is deterministic.
- :func:`show`: the ipywidgets version (choose, "检查", "提示").
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Question:
    """One question. ``answer`` is the index of the correct option, or a tuple of indices when several
    options must be chosen together; ``wrong`` maps an option index to what is wrong with choosing it."""

    prompt: str
    options: tuple
    answer: int | tuple
    explanation: str
    hint: str = ""
    wrong: dict = field(default_factory=dict)

    def __post_init__(self):
        if len(self.options) < 2 or len(self.options) > len(LETTERS):
            raise ValueError(f"a question needs 2..{len(LETTERS)} options, got {len(self.options)}")
        for i in self.correct:
            if not 0 <= i < len(self.options):
                raise ValueError(f"answer index {i} is not one of the {len(self.options)} options")

    @property
    def correct(self) -> frozenset:
        return frozenset(self.answer if isinstance(self.answer, tuple) else (self.answer,))

    @property
    def multiple(self) -> bool:
        return len(self.correct) > 1


@dataclass(frozen=True)
class Feedback:
    correct: bool
    message: str


def _to_index(choice, n: int) -> int:
    if isinstance(choice, str):
        c = choice.strip().upper().rstrip(".")
        if len(c) == 1 and c in LETTERS[:n]:
            return LETTERS.index(c)
        raise ValueError(f"unknown option {choice!r}; use a letter A..{LETTERS[n - 1]}")
    if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < n:
        raise ValueError(f"unknown option {choice!r}; use an index 0..{n - 1} or a letter")
    return choice


def check_answer(q: Question, choice) -> Feedback:
    """Check ``choice`` (index, letter, or an iterable of them for multi-answer questions) against ``q``.

    Returns Feedback(correct, message): the explanation when right; otherwise what is wrong with the
    chosen option (when the question says) and the hint. ``None`` or an empty choice asks to choose first.
    """
    if choice is None or (not isinstance(choice, (str, int)) and len(choice) == 0):
        return Feedback(False, "请先选择一个选项。")
    picks = [choice] if isinstance(choice, (str, int)) else list(choice)
    chosen = frozenset(_to_index(c, len(q.options)) for c in picks)
    if chosen == q.correct:
        return Feedback(True, "正确！" + q.explanation)
    parts = ["还不对。"]
    for i in sorted(chosen - q.correct):
        if i in q.wrong:
            parts.append(f"{LETTERS[i]}：{q.wrong[i]}")
    if q.multiple and chosen < q.correct:
        parts.append("还有正确的选项没有选。")
    if q.hint:
        parts.append(f"提示：{q.hint}")
    return Feedback(False, " ".join(parts))


def answer_text(q: Question) -> str:
    letters = "、".join(LETTERS[i] for i in sorted(q.correct))
    return f"{letters}。{q.explanation}"


def static_html(q: Question, number: int | None = None) -> str:
    """The question as HTML that needs no kernel: options listed, hint and answer folded in <details>."""
    e = html.escape
    title = f"<b>{number}.</b> " if number is not None else ""
    opts = "".join(f"<li>{LETTERS[i]}. {e(o)}</li>" for i, o in enumerate(q.options))
    hint = f"<details><summary>提示</summary>{e(q.hint)}</details>" if q.hint else ""
    return (f"<div class='mgpu-quiz'><p>{title}{e(q.prompt)}</p><ul style='list-style:none'>{opts}</ul>"
            f"{hint}<details><summary>参考答案</summary>{e(answer_text(q))}</details></div>")


def static_text(q: Question, number: int | None = None) -> str:
    """Plain-text twin of :func:`static_html` without the answer (what a terminal shows)."""
    head = f"{number}. " if number is not None else ""
    return "\n".join([head + q.prompt] + [f"  {LETTERS[i]}. {o}" for i, o in enumerate(q.options)])


class _Static:
    def __init__(self, q: Question, number: int | None):
        self.q, self.number = q, number

    def _repr_html_(self) -> str:
        return static_html(self.q, self.number)

    def __repr__(self) -> str:
        return static_text(self.q, self.number)


def static(q: Question, number: int | None = None) -> _Static:
    """Display object of the question (HTML + plain text): renders without a kernel."""
    return _Static(q, number)


def show(q: Question, number: int | None = None):
    """ipywidgets: the options, a "检查" button that checks the answer and a "提示" button."""
    import ipywidgets as W

    labels = [f"{LETTERS[i]}. {o}" for i, o in enumerate(q.options)]
    if q.multiple:
        picks = [W.Checkbox(value=False, description=lab, indent=False, layout=W.Layout(width="auto"))
                 for lab in labels]
        chooser = W.VBox(picks)

        def current():
            return [i for i, p in enumerate(picks) if p.value]
    else:
        chooser = W.RadioButtons(options=labels, value=None, layout=W.Layout(width="auto"))

        def current():
            return None if chooser.value is None else labels.index(chooser.value)

    check = W.Button(description="检查", button_style="primary")
    hint = W.Button(description="提示", disabled=not q.hint)
    feedback = W.HTML()
    head = f"<b>{number}.</b> " if number is not None else ""
    prompt = W.HTML(f"<p>{head}{html.escape(q.prompt)}</p>")

    def on_check(_):
        fb = check_answer(q, current())
        colour = "#009E73" if fb.correct else "#D55E00"
        feedback.value = f"<span style='color:{colour}'>{html.escape(fb.message)}</span>"

    def on_hint(_):
        feedback.value = f"<i>提示：{html.escape(q.hint)}</i>"

    check.on_click(on_check)
    hint.on_click(on_hint)
    box = W.VBox([prompt, chooser, W.HBox([check, hint]), feedback])
    box.check = on_check   # handy for tests: box.check(None)
    return box

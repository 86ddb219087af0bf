"""Review questions that wait for the learner: the answer is checked, and shown only after a first try. The
questions live in ``data/review_questions.json``, so a notebook holds only ids and its outputs no answer."""

import functools
import html
import re
from dataclasses import dataclass, field

from mgpu_helpers.report.recorded import read_json
from mgpu_helpers.widgets.style import PALETTE

LETTERS = "ABCDEFGHIJ"
BANK_FILE = "review_questions.json"
# How a notebook cell asks a question; the static export finds the ids the same way.
ASK_CALL = re.compile(r"""quiz\.ask\(\s*["']([\w-]+)["']""")


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
    qid: str = ""

    def __post_init__(self):
        if len(self.options) < 2 or len(self.options) > len(LETTERS):
            raise ValueError(f"a question needs 2..{len(LETTERS)} options, got {len(self.options)}")
        for i in self.correct:
            if not 0 <= i < len(self.options):
                raise ValueError(f"answer index {i} is not one of the {len(self.options)} options")
        for i in self.wrong:
            if i in self.correct or not 0 <= i < len(self.options):
                raise ValueError(f"the note for option {i} must be about a wrong option of this question")

    @property
    def correct(self) -> frozenset:
        return frozenset(self.answer if isinstance(self.answer, tuple) else (self.answer,))

    @property
    def multiple(self) -> bool:
        return len(self.correct) > 1

    @classmethod
    def from_dict(cls, d: dict) -> "Question":
        """From one entry of the data file (JSON: lists for tuples, string keys for ``wrong``)."""
        answer = tuple(d["answer"]) if isinstance(d["answer"], list) else d["answer"]
        wrong = {int(k): v for k, v in d.get("wrong", {}).items()}
        text = dict(prompt=d["prompt"], explanation=d["explanation"], hint=d.get("hint", ""), qid=d.get("id", ""))
        return cls(options=tuple(d["options"]), answer=answer, wrong=wrong, **text)


@dataclass(frozen=True)
class Feedback:
    correct: bool
    message: str


@functools.cache
def bank(name: str = BANK_FILE) -> tuple:
    """All questions of a data file in ``mgpu_helpers/data/``, in file order."""
    questions = tuple(Question.from_dict(d) for d in read_json(name)["questions"])
    ids = [q.qid for q in questions]
    if len(set(ids)) != len(ids) or not all(ids):
        raise ValueError(f"{name}: every question needs its own id, got {ids}")
    return questions


def get(qid: str, name: str = BANK_FILE) -> Question:
    """The question with id ``qid``; an unknown id raises ``KeyError`` listing the known ones."""
    for q in bank(name):
        if q.qid == qid:
            return q
    raise KeyError(f"no question {qid!r} in {name}; known ids: {', '.join(q.qid for q in bank(name))}")


def number_of(qid: str, name: str = BANK_FILE) -> int:
    """1-based position of the question in its data file (the number shown beside it)."""
    return [q.qid for q in bank(name)].index(get(qid, name).qid) + 1


def asked_ids(source: str) -> list[str]:
    """The question ids a cell's source asks with ``quiz.ask("id")``, in order."""
    return ASK_CALL.findall(source)


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
    """Check ``choice`` (index, letter, or an iterable of them for multi-answer questions) against ``q``: the
    explanation when right, else what is wrong with the chosen option (where the question says) and the hint."""
    if choice is None or (not isinstance(choice, (str, int)) and len(choice) == 0):
        return Feedback(False, "请先选择一个选项。")
    picks = [choice] if isinstance(choice, (str, int)) else list(choice)
    chosen = frozenset(_to_index(c, len(q.options)) for c in picks)
    if chosen == q.correct:
        return Feedback(True, "正确！" + q.explanation)
    parts = ["还不对。"] + [f"{LETTERS[i]}：{q.wrong[i]}" for i in sorted(chosen - q.correct) if i in q.wrong]
    if q.multiple and chosen < q.correct:
        parts.append("还有正确的选项没有选。")
    if q.hint:
        parts.append(f"提示：{q.hint}")
    return Feedback(False, " ".join(parts))


def answer_text(q: Question) -> str:
    """The correct letter(s), the explanation, then what is wrong with each wrong option that has a note."""
    letters = "、".join(LETTERS[i] for i in sorted(q.correct))
    notes = " ".join(f"{LETTERS[i]} 错在：{q.wrong[i]}" for i in sorted(q.wrong))
    return f"{letters}。{q.explanation}" + (f" {notes}" if notes else "")


def static_html(q: Question, number: int | None = None, with_answer: bool = True) -> str:
    """The question as HTML that needs no kernel: options listed, hint and (``with_answer``) answer folded in
    ``<details>``, so a reader of the static page tries first and opens them after."""
    e = html.escape
    title = f"<b>{number}.</b> " if number is not None else ""
    opts = "".join(f"<li>{LETTERS[i]}. {e(o)}</li>" for i, o in enumerate(q.options))
    hint = f"<details><summary>提示</summary>{e(q.hint)}</details>" if q.hint else ""
    folded = f"<details><summary>想一想之后再展开：参考答案</summary>{e(answer_text(q))}</details>"
    answer = folded if with_answer else ""
    body = f"<p>{title}{e(q.prompt)}</p><ul style='list-style:none'>{opts}</ul>{hint}{answer}"
    return f"<div class='mgpu-quiz'>{body}</div>"


def static_text(q: Question, number: int | None = None) -> str:
    """Plain text of the question and its options, without the answer (what a terminal shows)."""
    head = f"{number}. " if number is not None else ""
    return "\n".join([head + q.prompt] + [f"  {LETTERS[i]}. {o}" for i, o in enumerate(q.options)])


def show(q: Question, number: int | None = None):
    """ipywidgets: the options, "检查", "提示", and "看答案", which opens only after a first check."""
    import ipywidgets as W

    labels, wide = [f"{LETTERS[i]}. {o}" for i, o in enumerate(q.options)], W.Layout(width="auto")
    picks = [W.Checkbox(value=False, description=lab, indent=False, layout=wide) for lab in labels if q.multiple]
    chooser = W.VBox(picks) if q.multiple else W.RadioButtons(options=labels, value=None, layout=wide)

    def current():
        if q.multiple:
            return [i for i, p in enumerate(picks) if p.value]
        return None if chooser.value is None else labels.index(chooser.value)

    check = W.Button(description="检查", button_style="primary")
    hint = W.Button(description="提示", disabled=not q.hint)
    reveal = W.Button(description="看答案", disabled=True, tooltip="先选一个答案并点“检查”")
    feedback = W.HTML()
    head = f"<b>{number}.</b> " if number is not None else ""
    several = "（多选）" if q.multiple and "多选" not in q.prompt else ""
    prompt = W.HTML(f"<p>{head}{html.escape(q.prompt)}{several}</p>")

    def on_check(_):
        fb = check_answer(q, current())
        colour = PALETTE["green" if fb.correct else "vermillion"]
        feedback.value = f"<span style='color:{colour}'>{html.escape(fb.message)}</span>"
        if current() not in (None, []):
            reveal.disabled = False  # tried once: the answer may be opened now

    def on_hint(_):
        feedback.value = f"<i>提示：{html.escape(q.hint)}</i>"

    def on_reveal(_):
        feedback.value = f"<span>参考答案：{html.escape(answer_text(q))}</span>"

    check.on_click(on_check)
    hint.on_click(on_hint)
    reveal.on_click(on_reveal)
    box = W.VBox([prompt, chooser, W.HBox([check, hint, reveal]), feedback])
    box.check, box.reveal = on_check, on_reveal  # handy for tests: box.check(None)
    return box


def ask(qid: str, name: str = BANK_FILE):
    """The widget of question ``qid``, numbered by its place in the data file: one cell per question."""
    return show(get(qid, name), number_of(qid, name))

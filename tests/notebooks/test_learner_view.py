"""What the learner opens: every lesson asks them to write code and to predict, and shows no test scaffolding.

Read from the committed notebooks (the worked sources in solutions/ and the learner's versions in notebooks/
generated from them), so a lesson that drifts back into a book with answers printed fails here.
"""

import glob
import os
import re

import nbformat
import pytest

from mgpu_helpers.tools import exercises

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# 00 (set-up) and 11 (the review, checked by its quiz) are not lessons with fill-ins.
LESSONS = [
    p
    for p in sorted(glob.glob(os.path.join(ROOT, "solutions", "[0-9][0-9]_*.ipynb")))
    if os.path.basename(p)[:2] not in ("00", "11")
]
SCAFFOLD = re.compile(r"^\s*assert\b|NBVAL_", re.M)
MAX_VISIBLE_SCAFFOLD = 15
TEST_WORDS = re.compile(r"nbval|pytest|NBVAL|测试会|逐字检查")


def _regions(cell_source: str):
    """(functions the learner writes, names the learner sets) in a code cell, as the generator stubs them."""
    out, names = exercises.stub_source(cell_source)
    return len(names), out.count(" = None") - cell_source.count(" = None")


def _hidden(cell) -> bool:
    return bool(cell.metadata.get("jupyter", {}).get("source_hidden"))


def test_the_lesson_globs_find_the_lessons():
    assert len(LESSONS) == 13, [os.path.basename(p) for p in LESSONS]  # 01-10, 12, 13, 14


@pytest.mark.parametrize("path", LESSONS, ids=[os.path.basename(p)[:2] for p in LESSONS])
def test_every_lesson_has_two_checked_fill_ins_and_a_prediction(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    fill_ins, predictions = [], 0
    for k, cell in enumerate(code):
        if exercises.BEGIN not in cell.source:
            continue
        functions, names = _regions(cell.source)
        predictions += names
        if functions:
            fill_ins.append(k)
    assert len(fill_ins) >= 2, f"{os.path.basename(path)}: {len(fill_ins)} cell(s) where the learner writes code"
    assert predictions >= 1, f"{os.path.basename(path)}: no prediction or number left for the learner"
    for k in fill_ins:
        after = code[k + 1].source if k + 1 < len(code) else ""
        assert "mh.checks." in after or "checks." in after, (
            f"{os.path.basename(path)}: the fill-in in code cell {k} is not checked by the cell right after it"
        )


def test_the_learners_view_carries_at_most_15_visible_cells_of_test_scaffolding():
    visible = []
    for path in sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        visible += [
            f"{os.path.basename(path)}[{k}]"
            for k, c in enumerate(nb.cells)
            if c.cell_type == "code" and not _hidden(c) and SCAFFOLD.search(c.source)
        ]
    assert len(visible) <= MAX_VISIBLE_SCAFFOLD, f"{len(visible)} visible: {visible}"


def test_no_learner_text_talks_about_tests():
    said = []
    for path in sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        said += [
            f"{os.path.basename(path)}[{k}]"
            for k, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and TEST_WORDS.search(c.source)
        ]
    assert not said, said

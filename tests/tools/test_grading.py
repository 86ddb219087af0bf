"""A class graded with nbgrader: the course folder from tools/grading.py, nbgrader's own commands, three submissions.

One worked exercise of two fill-ins, each with a course checker. The submissions: one complete; one with a
typical wrong answer in each fill-in; one that does not run (a syntax error, an endless loop, a deleted check
cell); one whose code kills its kernel. nbgrader's autograde scores them 2, 0, 0 and 0 of 2, the endless loop
stopped at the cell time limit and the crash survived, without stopping the grading of the others, and the
feedback says what happened in each.
"""

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mgpu_helpers.tools import exercises, grading

pytestmark = pytest.mark.skipif(
    shutil.which("nbgrader", path=os.path.dirname(sys.executable)) is None,
    reason="nbgrader is not installed (pip install -e '.[test]')",
)

SPLIT = '''def contiguous_ranges(n_items, world_size):
    """One range per rank, in rank order, the first n_items % world_size ranks one item longer."""
    ### BEGIN SOLUTION
    base, extra = divmod(n_items, world_size)
    starts = [r * base + min(r, extra) for r in range(world_size + 1)]
    return [range(starts[r], starts[r + 1]) for r in range(world_size)]
    ### END SOLUTION'''
FEWEST = '''def fewest_gpus(strategy, capacity, params, grads, optimizer, activations):
    """The fewest GPUs (equal shares) on which every rank fits in `capacity`; None if no number does."""
    ### BEGIN SOLUTION
    import math
    split = {"replicate": (), "data_parallel": ("activations",), "zero1": ("optimizer", "activations"),
             "zero2": ("optimizer", "grads", "activations"),
             "zero3": ("params", "grads", "optimizer", "activations")}[strategy]
    sizes = dict(params=params, grads=grads, optimizer=optimizer, activations=activations)
    whole = sum(v for part, v in sizes.items() if part not in split)
    shared = sum(v for part, v in sizes.items() if part in split)
    if whole > capacity or (whole == capacity and shared > 0):
        return None
    return max(1, math.ceil(shared / (capacity - whole) - 1e-9)) if shared else 1
    ### END SOLUTION'''
WRONG = {
    "answer-split": "def contiguous_ranges(n_items, world_size):\n    size = -(-n_items // world_size)\n"
    "    return [range(min(r * size, n_items), min((r + 1) * size, n_items)) "
    "for r in range(world_size)]",
    "answer-fewest": "def fewest_gpus(strategy, capacity, params, grads, optimizer, activations):\n"
    "    total = params + grads + optimizer + activations\n    return -(-total // capacity)",
}
BROKEN = {
    "answer-split": "def contiguous_ranges(n_items, world_size)\n    return []",
    "answer-fewest": "while True:\n    pass",
}
CRASH = {"answer-split": "import os\nos._exit(1)          # the kernel process ends, as in a segfault"}


def _worked(folder: Path) -> Path:
    cells = [
        nbformat.v4.new_markdown_cell("# 练习 90 · 评分"),
        nbformat.v4.new_code_cell("import mgpu_helpers as mh"),
        nbformat.v4.new_code_cell(SPLIT),
        nbformat.v4.new_code_cell("mh.checks.sharding.check_contiguous_ranges(contiguous_ranges)"),
        nbformat.v4.new_code_cell(FEWEST),
        nbformat.v4.new_code_cell("mh.checks.check_rank_memory_fewest_gpus(fewest_gpus)"),
    ]
    for cell, cid in zip(cells, ("title", "setup", "split", "check-split", "fewest", "check-fewest")):
        cell.id = cid
    path = folder / "solutions" / "ex90_grading.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def _nbgrader(course: Path, *args) -> str:
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    env.pop("MGPU_GRADING", None)
    run = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout + run.stderr


def _submit(course: Path, student: str, release: dict, answers: dict, drop=()) -> None:
    nb = json.loads(json.dumps(release))
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    nb["cells"] = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") not in drop]
    target = course / "submitted" / student / "ex90_grading" / "ex90_grading.ipynb"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def _feedback(course: Path, student: str) -> str:
    page = (course / "feedback" / student / "ex90_grading" / "ex90_grading.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_the_learners_copy_carries_nbgraders_metadata(tmp_path):
    copy = exercises.learner_copy(exercises.tested_version(str(_worked(tmp_path))))
    meta = {c.id: c.metadata.get("nbgrader") for c in copy.cells}
    assert meta["split"]["solution"] and not meta["split"]["grade"] and meta["split"]["grade_id"] == "answer-split"
    assert meta["check-split"]["grade"] and meta["check-split"]["locked"] and meta["check-split"]["points"] == 1
    assert meta["setup"] is None and meta["title"] is None
    source = grading.grading_source(str(tmp_path / "solutions" / "ex90_grading.ipynb"))
    assert "### BEGIN SOLUTION" in source.cells[2].source and "divmod" in source.cells[2].source


def test_nbgrader_grades_a_complete_a_wrong_and_a_broken_submission(tmp_path):
    worked = _worked(tmp_path)
    course = tmp_path / "class"
    grading.setup(course, ["ex90_grading"], solutions=[worked], timeout=20)
    _nbgrader(course, "generate_assignment", "ex90_grading")
    release = json.loads((course / "release" / "ex90_grading" / "ex90_grading.ipynb").read_text(encoding="utf-8"))
    stub = [c for c in release["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "answer-split"][0]
    assert "练习：补全这里" in "".join(stub["source"]) and "divmod" not in "".join(stub["source"])
    solved = {
        f"answer-{key}": re.sub(r"\n\s*### (BEGIN|END) SOLUTION", "", code)
        for key, code in (("split", SPLIT), ("fewest", FEWEST))
    }
    _submit(course, "alice", release, solved)
    _submit(course, "bob", release, WRONG)
    _submit(course, "carol", release, BROKEN, drop=("check-check-fewest",))
    _submit(course, "dave", release, dict(solved, **CRASH))
    _nbgrader(course, "autograde", "ex90_grading")
    _nbgrader(course, "generate_feedback", "ex90_grading")
    _nbgrader(course, "export")
    with open(course / "grades.csv", encoding="utf-8") as f:
        scores = {row["student_id"]: (float(row["score"]), float(row["max_score"])) for row in csv.DictReader(f)}
    assert scores == {"alice": (2.0, 2.0), "bob": (0.0, 2.0), "carol": (0.0, 2.0), "dave": (0.0, 2.0)}
    bob, carol = _feedback(course, "bob"), _feedback(course, "carol")
    assert bob.count("检查没有通过") == 2 and "most recent call last" not in bob  # the checker's own words
    assert "SyntaxError" in carol and "CellTimeoutError" in carol  # what happened, cell by cell
    assert "missing from the submission" in carol  # the deleted check was put back
    assert "没有完成" in carol or "NameError" in carol or "NotImplementedError" in carol
    assert "KernelDied" in _feedback(course, "dave")  # a crash: graded on in a new kernel

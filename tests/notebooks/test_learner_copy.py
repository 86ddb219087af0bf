"""The copy a learner opens asks and never answers.

Read from the committed copies (notebooks/, exercises/) and the worked notebooks they are generated from:

- no outputs are stored, no assertion, test marker or maintainer's marker is left in the copy;
- every answer folded from the worked notebook is there, folded, and is no pointer elsewhere;
- for every fill-in and every prediction, no cell of the copy before the cell that checks it holds its answer.

How an answer is looked for:

- a fill-in's answer is each code line of its solution (comments stripped, 14 characters or more, no import) that
  the worked notebook does not already give as a whole line of code before the check (a worked example, the
  code around the fill-in); each must be absent from every cell before the check, text and code alike;
- a prediction's answer is its worked value: an expression as written, a string unless it is one of the
  choices offered in the code above it, and a number that has a fraction other than .0 or .5 (whole and half
  numbers occur in any text, and the two rules below keep them out of the copy: no outputs, no assertions).
"""

import ast
import os
import re

import nbformat
import pytest

from mgpu_helpers.tools import exercises, nbtools

SOLUTIONS = exercises.solution_paths()
IDS = [os.path.basename(p).split("_")[0] for p in SOLUTIONS]
MARKERS = re.compile(r"NBVAL_|### (BEGIN|END) (SOLUTION|HIDDEN TESTS)|<!-- (BEGIN|END) SOLUTION -->|#\| export")
POINTER = re.compile(r"参考答案见")
MIN_LINE = 14


def _copy(path):
    """(worked notebook, the learner's copy) for a worked notebook's path."""
    return nbformat.read(path, as_version=4), exercises.learner_copy(exercises.tested_version(path))


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _strip_comment(line: str) -> str:
    """The line without its ``#`` comment (a ``#`` inside a string is no comment)."""
    comment = exercises._comment(line)
    return line[: line.rindex(comment)].rstrip() if comment else line


def _code_lines(source: str) -> set[str]:
    """The normalized lines of code of a cell, comments stripped."""
    return {_norm(_strip_comment(ln)) for ln in source.split("\n")} - {""}


def _regions(source: str):
    """Each solution region of a worked code cell: ("fill-in", [function], answer lines) or
    ("prediction", [names], [value as written]) per assignment."""
    lines, out, i = source.split("\n"), [], 0
    while i < len(lines):
        if lines[i].strip() != exercises.BEGIN:
            i += 1
            continue
        j = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == exercises.END)
        region, text = lines[i + 1 : j], "\n".join(lines[i + 1 : j])
        owner = exercises._top_level_function(lines[:i]) if lines[i][0].isspace() else None
        if owner is None:
            for node in ast.parse(text).body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out.append(("prediction", [t.id for t in targets], [ast.get_source_segment(text, node.value)]))
        else:
            code = [_norm(_strip_comment(ln)) for ln in region]
            out.append(
                ("fill-in", [owner], [c for c in code if len(c) >= MIN_LINE and not c.startswith(("import ", "from "))])
            )
        i = j + 1
    return out


def _prediction_forms(value: str, offered: set[str]) -> list[str]:
    try:
        v = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return [value]  # an expression: its text
    if isinstance(v, str):
        return [] if v in offered else [v]
    if isinstance(v, float) and not (2 * v).is_integer():
        return [repr(v)]
    return []


def leaks(path: str) -> list[str]:
    """Where the learner's copy of the worked notebook at ``path`` answers a fill-in or prediction before its
    check: one line each, empty when it does not."""
    worked, copy = _copy(path)
    ids = [c.get("id") for c in copy.cells]
    found = []
    for k, cell in enumerate(worked.cells):
        if cell.cell_type != "code" or exercises.BEGIN not in cell.source:
            continue
        at = ids.index(cell.id)
        for kind, names, answers in _regions(cell.source):
            check = next(
                (
                    q
                    for q in range(at + 1, len(copy.cells))
                    if copy.cells[q].cell_type == "code"
                    and any(re.search(rf"\b{re.escape(n)}\b", copy.cells[q].source) for n in names)
                ),
                len(copy.cells),
            )
            before = [c for c in worked.cells[: k + 1] if c.cell_type == "code"]
            if kind == "fill-in":
                given = set().union(*(_code_lines(exercises.stub_source(c.source)[0]) for c in before))
                forms = [a for a in answers if a not in given]
            else:
                offered = {
                    s.value
                    for c in before
                    for s in ast.walk(_parse(c.source))
                    if isinstance(s, ast.Constant) and isinstance(s.value, str)
                }
                forms = [f for a in answers for f in _prediction_forms(a, offered)]
            for q in range(check):
                text = _norm(copy.cells[q].source)
                for form in forms:
                    hit = (
                        re.search(rf"(?<![\w.]){re.escape(form)}(?!\w)", text)
                        if kind == "prediction"
                        else _norm(form) in text
                    )
                    if hit:
                        found.append(
                            f"{os.path.basename(path)}: the {kind} {names[0]} is answered in cell {q} "
                            f"(its check is cell {check}): {form!r}"
                        )
    return found


def _parse(source: str):
    try:
        return ast.parse("\n".join(ln for ln in source.split("\n") if not ln.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def test_the_worked_notebooks_are_found():
    assert len([p for p in SOLUTIONS if exercises.is_lesson(p)]) >= 14 and len(SOLUTIONS) >= 27


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_no_cell_before_a_check_holds_its_answer(path):
    assert not leaks(path), "\n".join(leaks(path))


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_the_committed_copy_stores_no_output_and_no_marker(path):
    copy = nbformat.read(exercises.learner_path(path), as_version=4)
    for k, cell in enumerate(copy.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"cell {k} stores outputs"
            assert not any(isinstance(n, ast.Assert) for n in ast.walk(_parse(cell.source))), (
                f"cell {k} holds an assertion: it belongs in a hidden test of the worked notebook"
            )
        assert not MARKERS.search(cell.source), f"cell {k} shows a maintainer's marker"
        assert not POINTER.search(cell.source), f"cell {k} points elsewhere instead of folding the answer"


@pytest.mark.parametrize("path", SOLUTIONS, ids=IDS)
def test_every_answer_of_the_worked_notebook_is_folded_in_the_copy(path):
    worked, copy = _copy(path)
    answers = [
        m.group(1).strip()
        for c in worked.cells
        if c.cell_type == "markdown"
        for m in re.finditer(re.escape(exercises.MD_BEGIN) + r"(.*?)" + re.escape(exercises.MD_END), c.source, re.S)
    ]
    text = "\n".join(c.source for c in copy.cells if c.cell_type == "markdown")
    for answer in answers:
        assert answer and answer in text, f"an answer of {os.path.basename(path)} is missing from the copy"
        at = text.index(answer)
        assert text[:at].count("<details") > text[:at].count("</details>"), "an answer is shown unfolded"


def test_the_leak_finder_finds_each_kind_of_answer(tmp_path, monkeypatch):
    """A worked notebook whose copy gives away a fill-in in its text, a prediction in a comment and a number
    in Markdown is reported three times; the same notebook without them, not at all."""
    cells = [
        nbformat.v4.new_markdown_cell("Write `double`: `result_is = x + x`, then return it."),
        nbformat.v4.new_code_cell(
            "def double(x):\n    ### BEGIN SOLUTION\n    result_is = x + x\n    return result_is\n    ### END SOLUTION"
        ),
        nbformat.v4.new_code_cell("double = check(double)"),
        nbformat.v4.new_markdown_cell("The ratio is about 0.75 here."),
        nbformat.v4.new_code_cell(
            "# the size is len(data) * 3\n### BEGIN SOLUTION\nmy_ratio = 0.75\n"
            "my_size = len(data) * 3\n### END SOLUTION"
        ),
        nbformat.v4.new_code_cell("compare(my_ratio, my_size)"),
    ]
    sol = tmp_path / "solutions" / "ex99_tiny.ipynb"
    sol.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=cells), sol)
    found = leaks(str(sol))
    assert len(found) == 3 and {f.split("'")[1] for f in found} == {"result_is = x + x", "0.75", "len(data) * 3"}, found
    cells[0].source, cells[3].source = "Write `double`.", "Guess the ratio."
    cells[4].source = cells[4].source.replace("# the size is len(data) * 3\n", "")
    nbformat.write(nbformat.v4.new_notebook(cells=cells), sol)
    assert leaks(str(sol)) == []


def _write_course(root, name, cells):
    """A worked notebook in ``root/solutions`` and its learner's copy in ``root/notebooks``, as generated."""
    sol = root / "solutions" / name
    sol.parent.mkdir(exist_ok=True)
    (root / "notebooks").mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = dict(nbtools.KERNELSPEC)
    nbformat.write(nb, sol)
    (root / "notebooks" / name).write_text(exercises.render(str(sol)), encoding="utf-8")
    return sol


def test_the_suite_runs_the_copy_with_its_hidden_tests_and_the_worked_outputs(tmp_path):
    """Under nbval (with tests/learner_copies.py), a learner's copy passes when it prints what the worked notebook
    printed and its hidden tests hold; it fails when a hidden test fails, when it would print something else,
    and it is not run at all when it is not what its worked notebook generates."""
    import subprocess
    import sys

    def checked(code, text):
        cell = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\n" + code)
        cell.outputs, cell.execution_count = [nbformat.v4.new_output("stream", text=text)], 1
        return cell

    hidden = "### BEGIN HIDDEN TESTS\nassert X == {}\n### END HIDDEN TESTS\n"
    _write_course(
        tmp_path, "97_ok.ipynb", [nbformat.v4.new_code_cell("X = 2"), checked(hidden.format(2) + "print(X)", "2\n")]
    )
    _write_course(
        tmp_path, "98_hidden.ipynb", [nbformat.v4.new_code_cell("X = 2"), checked(hidden.format(3) + "print(X)", "2\n")]
    )
    _write_course(
        tmp_path,
        "99_prints.ipynb",
        [
            nbformat.v4.new_code_cell("### BEGIN SOLUTION\nX = 2  # your guess\n### END SOLUTION"),
            checked("print(X)", "2\n"),
        ],
    )
    sol = _write_course(tmp_path, "96_edited.ipynb", [nbformat.v4.new_code_cell("X = 2")])
    edited = tmp_path / "notebooks" / sol.name
    edited.write_text(edited.read_text(encoding="utf-8").replace("X = 2", "X = 5"), encoding="utf-8")
    for name in ("97_ok", "98_hidden", "99_prints"):
        copy = nbformat.read(tmp_path / "notebooks" / f"{name}.ipynb", as_version=4)
        assert all(c.outputs == [] and "assert" not in c.source for c in copy.cells)
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "learner_copies",
            "-p",
            "no:randomly",
            "--nbval-lax",
            "--nbval-current-env",
            "-rA",
            "-o",
            "addopts=",
            "--continue-on-collection-errors",
            "notebooks",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [tests_dir, os.path.dirname(tests_dir)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)
            ),
        ),
    )
    out = run.stdout + run.stderr
    assert "PASSED notebooks/97_ok.ipynb::Cell 1" in out, out
    assert "FAILED notebooks/98_hidden.ipynb::Cell 1" in out, out
    assert "FAILED notebooks/99_prints.ipynb::Cell 1" in out, out
    assert "ERROR notebooks/96_edited.ipynb" in out and "is not what" in out, out

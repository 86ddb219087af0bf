"""The learner's notebooks generated from the worked ones: one hand-edited copy of every lesson and exercise.

    python -m mgpu_helpers.tools.exercises generate   # write notebooks/ and exercises/ from solutions/
    python -m mgpu_helpers.tools.exercises check      # exit 1 if regenerating would change a committed file

``solutions/NN_name.ipynb`` (a lesson) -> ``notebooks/``; ``solutions/exNN_name.ipynb`` (an exercise) ->
``exercises/``. In a worked notebook (nbgrader's markers):

- ``### BEGIN/END SOLUTION`` inside a function becomes ``raise NotImplementedError("练习：补全这里（约 N 行）")``,
  N the code lines removed; the ``def`` and docstring above stay (the spec), and so do ``# ✎`` hint lines. Outside
  a function a region may hold only assignments (a prediction): each becomes ``name = None``;
- markdown between ``<!-- BEGIN/END SOLUTION -->`` (an answer) stays, folded in a ``<details>`` block;
- ``### BEGIN/END HIDDEN TESTS`` are left out (a cell of nothing else, whole); the suite runs the learner's copy
  with them put back (:func:`tested_version`), as nbgrader's autograder does;
- in a lesson, an ``#| export`` cell tagged ``worked-only`` becomes an import of what it defines from the
  generated module, so the cells after it run without its source being there.

In an **exercise**, a cell that uses a stubbed function, or starts with ``# EXERCISE_CHECK``, is tagged
``raises-exception``: an untouched exercise runs top to bottom (nbval) while each such cell still ends in the
stub's error. A **lesson** gets no tags: the cell after a fill-in passes the learner's function to its checker,
which gives back the reference while it is still the stub, so later cells run either way; a checked cell may not
hold a fill-in. The copy a learner opens holds no outputs and no maintainer's markers: nothing there answers a
question before the learner runs the cell that checks it; nbval compares the tested version's checked outputs
with the worked notebook's.
"""

import ast
import copy
import glob
import io
import os
import re
import sys
import tokenize

import nbformat

from mgpu_helpers import tracking
from mgpu_helpers.tools import nbtools
from mgpu_helpers.tools.nbexport import MARKER as EXPORT_LINE

ROOT = str(tracking.ROOT)
SOLUTIONS_DIR = os.path.join(ROOT, "solutions")
EXERCISES_DIR = os.path.join(ROOT, "exercises")
NOTEBOOKS_DIR = os.path.join(ROOT, "notebooks")
LESSON_NAME = re.compile(r"^\d\d_\w+\.ipynb$")

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
MD_BEGIN, MD_END = "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->"
CHECK_MARK = "# EXERCISE_CHECK"
RAISES_TAG = "raises-exception"
STUB_TEXT = "练习：补全这里（约 {n} 行）"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
HIDDEN_REGION = re.compile(rf"^[ \t]*{HIDDEN_BEGIN}[ \t]*\n.*?^[ \t]*{HIDDEN_END}[ \t]*(?:\n|\Z)", re.S | re.M)
CHECK_LINE = re.compile(rf"\A[ \t]*{nbtools.CHECK_MARK}[ \t]*(?:\n|\Z)")
FOLD_OPEN = "<details><summary>自己想过、写过之后再展开：参考答案</summary>\n\n"
FOLD_CLOSE = "\n</details>"
HINT_MARK = "# ✎"
WORKED_ONLY_TAG = "worked-only"
WORKED_ONLY_TEXT = "# 课程的完整实现在这里只载入、不展示（讲解版 solutions/{name} 里有源码）。\nfrom mgpu_helpers.lessons.{module} import {names}"
LESSON_BANNER = (
    '\n\n> **学习版**：有些地方等你来写——函数里是 `raise NotImplementedError("练习：补全这里（约 N 行）")`，'
    "预测和估算是 `= None`。写完运行紧跟着的那一格，它会立刻检查；没写的地方，后面的单元格先用参考实现，"
    "并且会告诉你。讲解版（含答案）：`solutions/{name}`，自己试过再看。"
)
BANNER = (
    '\n\n> **练习版**：在 `raise NotImplementedError("练习：补全这里（约 N 行）")` 的位置写你的代码，'
    "再运行下面的 `check` 单元格。自己试过之后，参考答案在 `solutions/{name}`。"
)

_TOP_DEF = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)\s*[(:]")  # unindented: a top-level def or class


class MarkerError(ValueError):
    """Solution markers that do not pair up, or sit outside a function."""


def stub_source(source: str, keep_functions: bool = False) -> tuple[str, list[str]]:
    """``(source with each solution region stubbed, the top-level functions stubbed)``. ``keep_functions``: a
    function's region stays, markers and all (nbgrader's source); predictions are still stubbed."""
    lines, out, names, start = source.split("\n"), [], [], None
    for i, ln in enumerate(lines):
        if ln.strip() == BEGIN:
            if start is not None:
                raise MarkerError(f"nested {BEGIN!r} at line {i + 1}")
            start = i
        elif ln.strip() == END:
            if start is None:
                raise MarkerError(f"{END!r} without {BEGIN!r} at line {i + 1}")
            region, indent = lines[start + 1 : i], lines[start][: len(lines[start]) - len(lines[start].lstrip())]
            owner = _top_level_function(lines[:start]) if indent else None
            names += [owner] if owner is not None and owner not in names else []
            if owner is None:
                out += _stub_assignments(region, start + 1)
            elif keep_functions:
                out += lines[start : i + 1]
            else:
                out += [r for r in region if r.strip().startswith(HINT_MARK)]
                n = max(1, sum(1 for r in region if r.strip() and not r.strip().startswith("#")))  # lines to write
                out.append(f'{indent}raise NotImplementedError("{STUB_TEXT.format(n=n)}")')
            start = None
        elif start is None:
            out.append(ln)
    if start is not None:
        raise MarkerError(f"{BEGIN!r} at line {start + 1} has no {END!r}")
    return "\n".join(out), names


def _stub_assignments(region: list[str], line_no: int) -> list[str]:
    """Every ``name = value`` becomes ``name = None``, its first line's comment kept."""
    try:
        tree = ast.parse("\n".join(region))
    except SyntaxError as exc:
        raise MarkerError(f"the solution region at line {line_no} does not parse: {exc}") from None
    out = [r for r in region if r.strip().startswith(HINT_MARK)]
    for node in tree.body:
        annotated = [node.target] if isinstance(node, ast.AnnAssign) else []
        targets = node.targets if isinstance(node, ast.Assign) else annotated
        if not targets or not all(isinstance(t, ast.Name) for t in targets):
            rule = "outside a function a region may hold only assignments to names (a prediction, a number)"
            raise MarkerError(f"the solution region at line {line_no} is not inside a function: {rule}")
        comment = _comment(region[node.lineno - 1])
        out.append(" = ".join(t.id for t in targets) + " = None" + (f"  {comment}" if comment else ""))
    return out


def _comment(line: str) -> str:
    """The line's ``#`` comment, or "" (a ``#`` inside a string is none)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(line).readline)
        return next((t.string for t in tokens if t.type == tokenize.COMMENT), "")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return ""


def _top_level_function(lines_above: list[str]) -> str | None:
    """The unindented ``def`` or ``class`` the next line belongs to (None at the cell's top level)."""
    for ln in reversed(lines_above):
        if m := _TOP_DEF.match(ln):
            return m.group(1)
        if ln and not ln[0].isspace() and not ln.startswith(("@", "#", ")")):
            return None  # another top-level statement: the region is outside any function
    return None


def fold_markdown(source: str) -> str:
    """The answers of a markdown cell without markers, inside the ``<details>`` they sit in, or one of their own."""
    pattern = re.compile(re.escape(MD_BEGIN) + r"(.*?)" + re.escape(MD_END), re.S)
    if source.count(MD_BEGIN) != source.count(MD_END) or len(pattern.findall(source)) != source.count(MD_BEGIN):
        raise MarkerError("unpaired <!-- BEGIN/END SOLUTION --> markers in a markdown cell")

    def fold(m):
        before = source[: m.start()]
        folded = before.count("<details") > before.count("</details>")
        answer = m.group(1).strip("\n")
        return answer if folded else FOLD_OPEN + answer + FOLD_CLOSE

    return pattern.sub(fold, source)


def without_hidden_tests(source: str) -> str | None:
    """A code cell's source without its hidden tests; None when only comments are left (a hidden test cell)."""
    found = HIDDEN_REGION.findall(source)
    if source.count(HIDDEN_BEGIN) != source.count(HIDDEN_END) or len(found) != source.count(HIDDEN_BEGIN):
        raise MarkerError("unpaired ### BEGIN/END HIDDEN TESTS markers in a code cell")
    out = HIDDEN_REGION.sub("", source)
    if not found or any(ln.strip() and not ln.strip().startswith("#") for ln in out.split("\n")):
        return out.strip("\n") if found else source
    return None


def learner_copy(nb, keep_outputs: bool = False, hidden_tests: bool = False):
    """The copy a learner opens, from :func:`tested_version`'s: no hidden tests, no ``# NBVAL_CHECK_OUTPUT`` lines,
    and no outputs (``keep_outputs`` keeps a run's, for a copy shown as it ran; ``hidden_tests`` keeps those, for
    nbgrader's source)."""
    out = copy.deepcopy(nb)
    for cell in (c for c in out.cells if c.cell_type == "code"):
        src = cell.source if hidden_tests else without_hidden_tests(cell.source)
        cell.source = None if src is None else CHECK_LINE.sub("", src)
    out.cells = [c for c in out.cells if c.source is not None]
    return out if keep_outputs else nbtools.clean(out, keep_checked_outputs=False)


def make_exercise(nb, name: str = "", keep_solutions: bool = False):
    """``(exercise notebook as the suite tests it, stubbed names)``; ``name``: the solution's file, for the banner."""
    return _learner_version(nb, name, keep_solutions, lesson=False)


def make_lesson(nb, name: str = "", keep_solutions: bool = False):
    """``(learner's lesson as the suite tests it, checked outputs kept, stubbed names)``."""
    return _learner_version(nb, name, keep_solutions, lesson=True)


def _learner_version(nb, name: str, keep_solutions: bool, lesson: bool):
    out, stubbed, defining = copy.deepcopy(nb), [], set()
    for k, cell in enumerate(out.cells):
        if cell.cell_type == "markdown" and MD_BEGIN in cell.source:
            cell.source = fold_markdown(cell.source)
        if cell.cell_type != "code":
            continue
        if lesson and WORKED_ONLY_TAG in cell.metadata.get("tags", []):
            cell.source = _import_instead(cell, nb.metadata.get("mgpu", {}).get("export"), name, k)
            tags = [t for t in cell.metadata.pop("tags") if t != WORKED_ONLY_TAG]
            cell.metadata |= {"tags": tags} if tags else {}
            cell.metadata.pop("jupyter", None)
            continue
        if BEGIN in cell.source:
            if lesson and nbtools.is_checked(cell):
                why = "its output would differ between the worked and the learner's version"
                raise MarkerError(f"cell {k} of {name or 'the lesson'} is checked by nbval and holds a fill-in: {why}")
            cell.source, names = stub_source(cell.source, keep_solutions)
            stubbed += [n for n in names if n not in stubbed]
            defining.add(k)
            if names:  # a cell where the learner writes a function (a prediction is not graded)
                _nbgrader(cell, "answer")
        first, _, rest = cell.source.partition("\n")
        if lesson and EXPORT_LINE.match(first.strip()):
            cell.source = rest
    # an exercise's cells that end in a stub's error say so
    for cell in (c for k, c in enumerate(out.cells) if not lesson and c.cell_type == "code" and k not in defining):
        uses_a_stub = any(re.search(rf"\b{re.escape(n)}\b", cell.source) for n in stubbed)
        if cell.source.lstrip().startswith(CHECK_MARK) or uses_a_stub:
            tags = cell.metadata.setdefault("tags", [])
            if RAISES_TAG not in tags:
                tags.append(RAISES_TAG)
    fills_in = not lesson or any(c.cell_type == "code" and BEGIN in c.source for c in nb.cells)
    first_md = next((c for c in out.cells if c.cell_type == "markdown"), None)
    if first_md is not None and name and fills_in:
        first_md.source = first_md.source.rstrip() + (LESSON_BANNER if lesson else BANNER).format(name=name)
    _mark_checks(out)
    return nbtools.clean(out, keep_checked_outputs=lesson), stubbed


def _nbgrader(cell, kind: str, **points) -> None:
    """nbgrader's metadata: ``"answer"`` (the learner writes there) or ``"check"`` (autograded, locked)."""
    check = kind == "check"
    cell.metadata["nbgrader"] = dict(grade=check, solution=not check, locked=check, schema_version=3)
    cell.metadata["nbgrader"] |= {"grade_id": f"{kind}-{cell.id}", **points}


def _mark_checks(nb) -> None:
    """Autograded: a check of the learner's code (a point), hidden tests (none: they guard the notebook's own)."""
    for cell in (c for c in nb.cells if c.cell_type == "code" and "nbgrader" not in c.metadata):
        if tracking.CHECK_CALL.search(cell.source) or HIDDEN_BEGIN in cell.source:
            _nbgrader(cell, "check", points=1 if tracking.CHECK_CALL.search(cell.source) else 0)


def _import_instead(cell, default_module, name: str, k: int) -> str:
    """The learner's line for a ``worked-only`` cell: import what it defines from its generated module."""
    lines = cell.source.split("\n")
    marker = EXPORT_LINE.match(lines[0].strip())  # `#| export [NAME]`
    if not (module := marker and (marker.group("name") or default_module)):
        why = "the learner's version could not load what it defines"
        raise MarkerError(f"cell {k} of {name} is tagged {WORKED_ONLY_TAG!r} but is not an `#| export` cell: {why}")
    names = []
    for node in ast.parse("\n".join(lines[1:])).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return WORKED_ONLY_TEXT.format(name=name, module=module, names=", ".join(dict.fromkeys(names)))


def is_lesson(path: str) -> bool:
    return bool(LESSON_NAME.match(os.path.basename(path)))


def solution_paths() -> list[str]:
    return sorted(glob.glob(os.path.join(SOLUTIONS_DIR, "*.ipynb")))


def tested_version(solution_path: str, keep_solutions: bool = False):
    """The learner's notebook as the suite runs it: with the hidden tests, the ``# NBVAL_CHECK_OUTPUT`` lines and
    (in a lesson) the checked outputs. ``keep_solutions``: the solutions stay between their markers (nbgrader)."""
    nb = nbformat.read(solution_path, as_version=4)
    return _learner_version(nb, os.path.basename(solution_path), keep_solutions, is_lesson(solution_path))[0]


def render(solution_path: str, tested=None) -> str:
    """The learner's notebook as the exact committed text (``tested``: its :func:`tested_version`, if at hand)."""
    out = learner_copy(tested if tested is not None else tested_version(solution_path))
    nbformat.validate(out)
    text = nbformat.writes(out)
    return text if text.endswith("\n") else text + "\n"  # as nbformat.write (and nbtools) save it


def learner_path(solution_path: str) -> str:
    folder = NOTEBOOKS_DIR if is_lesson(solution_path) else EXERCISES_DIR
    return os.path.join(folder, os.path.basename(solution_path))


def generate() -> list[str]:
    """Write every learner's notebook; returns the paths whose text changed."""
    paths = {sol: learner_path(sol) for sol in solution_paths()}
    return [path for sol, path in paths.items() if nbtools.write_if_changed(path, render(sol))]


def out_of_sync() -> list[str]:
    """Why the committed learner's notebooks differ from what ``generate`` would write (empty when in sync)."""
    sols = solution_paths()
    if all(is_lesson(sol) for sol in sols):
        return [f"no solution notebooks found in {SOLUTIONS_DIR}"]
    problems = []
    for sol in sols:
        path = learner_path(sol)
        old, rel = nbtools.read_text(path), os.path.relpath(path, ROOT)
        if old is None:
            problems.append(f"{rel} is missing")
        elif old != render(sol):
            problems.append(f"{rel} is not what {os.path.relpath(sol, ROOT)} generates")
    wanted = {learner_path(sol) for sol in sols}
    extra = [p for d in (EXERCISES_DIR, NOTEBOOKS_DIR) for p in sorted(glob.glob(os.path.join(d, "*.ipynb")))]
    orphans = [os.path.relpath(p, ROOT) for p in extra if p not in wanted]
    return problems + [f"{rel} has no worked notebook in solutions/" for rel in orphans]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("generate", "check"):
        print(__doc__)
        return 2
    if argv[0] == "generate":
        for path in generate():
            print(f"wrote {os.path.relpath(path, ROOT)}")
        return 0
    run = "run `python -m mgpu_helpers.tools.exercises generate`"
    if nbtools.report(out_of_sync(), f"notebooks/ and exercises/ are not in sync with solutions/: {run}"):
        return 1
    print(f"notebooks/ and exercises/ in sync with {len(solution_paths())} worked notebook(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Exercise notebooks generated from the worked solutions: one hand-edited copy of every exercise.

    python -m mgpu_helpers.tools.exercises generate   # write exercises/*.ipynb from solutions/*.ipynb
    python -m mgpu_helpers.tools.exercises check      # exit 1 if regenerating would change a committed file

In a solution notebook (nbgrader's markers):

- code between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes, in the exercise, one line at the
  marker's indentation: ``raise NotImplementedError("练习：补全这里（约 N 行）")``, N being the number of code
  lines removed (blank lines and comment-only lines not counted). The ``def`` line and docstring above the
  marker stay, so the reader sees the signature and the spec;
- markdown between ``<!-- BEGIN SOLUTION -->`` and ``<!-- END SOLUTION -->`` is dropped (a one-line
  pointer to the solution notebook takes its place);
- a code cell that uses a function whose body was stubbed (its name appears in the cell), or whose first
  line is ``# EXERCISE_CHECK``, gets the cell tag ``raises-exception`` in the exercise: an untouched exercise
  notebook then runs top to bottom ("Run All", nbval) and stops nowhere, while every such cell still ends
  in the stub's error (or the checker's "这个练习还没有完成").

Exercise notebooks carry no outputs (:func:`mgpu_helpers.tools.nbtools.clean` with ``keep_checked_outputs=False``).
"""
from __future__ import annotations

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOLUTIONS_DIR = os.path.join(ROOT, "solutions")
EXERCISES_DIR = os.path.join(ROOT, "exercises")

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
MD_BEGIN, MD_END = "<!-- BEGIN SOLUTION -->", "<!-- END SOLUTION -->"
CHECK_MARK = "# EXERCISE_CHECK"
RAISES_TAG = "raises-exception"
STUB_TEXT = "练习：补全这里（约 {n} 行）"
MD_POINTER = "*（参考答案见 `solutions/` 里的同名 Notebook。）*"
BANNER = ("\n\n> **练习版**：在 `raise NotImplementedError(\"练习：补全这里（约 N 行）\")` 的位置写你的代码，"
          "再运行下面的 `check` 单元格。参考答案：`solutions/{name}`。本文件由 "
          "`python -m mgpu_helpers.tools.exercises generate` 从参考答案生成。")

_DEF = re.compile(r"^(\s*)def\s+(\w+)\s*\(")


class MarkerError(ValueError):
    """Solution markers that do not pair up, or sit outside a function."""


def _code_lines(lines: list[str]) -> int:
    """Lines a reader has to write: not blank, not comment-only."""
    return sum(1 for ln in lines if ln.strip() and not ln.strip().startswith("#"))


def stub_source(source: str) -> tuple[str, list[str]]:
    """Replace each solution region of a code cell by a ``raise NotImplementedError`` stub.

    Returns ``(new_source, names)``: ``names`` are the top-level functions whose bodies were stubbed, in
    order of appearance (no repeats). Raises :class:`MarkerError` for an unpaired marker or a region that is
    not inside a function.
    """
    lines = source.split("\n")
    out: list[str] = []
    names: list[str] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.strip() == END:
            raise MarkerError(f"{END!r} without {BEGIN!r} at line {i + 1}")
        if ln.strip() != BEGIN:
            out.append(ln)
            i += 1
            continue
        indent = ln[: len(ln) - len(ln.lstrip())]
        j = i + 1
        while j < len(lines) and lines[j].strip() != END:
            if lines[j].strip() == BEGIN:
                raise MarkerError(f"nested {BEGIN!r} at line {j + 1}")
            j += 1
        if j == len(lines):
            raise MarkerError(f"{BEGIN!r} at line {i + 1} has no {END!r}")
        owner = _top_level_function(lines[:i])
        if owner is None:
            raise MarkerError(f"the solution region at line {i + 1} is not inside a function")
        if owner not in names:
            names.append(owner)
        n = max(1, _code_lines(lines[i + 1:j]))
        out.append(f'{indent}raise NotImplementedError("{STUB_TEXT.format(n=n)}")')
        i = j + 1
    return "\n".join(out), names


def _top_level_function(lines_above: list[str]) -> str | None:
    """Name of the unindented ``def`` the next line belongs to (None if the last top-level line is not a def)."""
    for ln in reversed(lines_above):
        m = _DEF.match(ln)
        if m and m.group(1) == "":
            return m.group(2)
        if ln and not ln[0].isspace() and not ln.startswith(("@", "#", ")")):
            return None   # another top-level statement: the region is outside any function
    return None


def strip_markdown(source: str) -> str:
    """Drop the ``<!-- BEGIN SOLUTION -->`` ... ``<!-- END SOLUTION -->`` parts of a markdown cell."""
    pattern = re.compile(re.escape(MD_BEGIN) + r".*?" + re.escape(MD_END), re.S)
    if source.count(MD_BEGIN) != source.count(MD_END) or len(pattern.findall(source)) != source.count(MD_BEGIN):
        raise MarkerError("unpaired <!-- BEGIN/END SOLUTION --> markers in a markdown cell")
    return pattern.sub(MD_POINTER, source)


def _uses(source: str, names) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", source) for n in names)


def make_exercise(nb, name: str = ""):
    """The exercise version of a solution notebook (a new notebook; ``nb`` is left as it is).

    ``name``: the solution's file name, for the banner added to the first markdown cell.
    Returns ``(exercise_nb, stubbed_names)``.
    """
    import copy

    from mgpu_helpers.tools import nbtools

    ex = copy.deepcopy(nb)
    stubbed: list[str] = []
    defining = set()
    for k, cell in enumerate(ex.cells):
        if cell.cell_type == "code" and BEGIN in cell.source:
            cell.source, names = stub_source(cell.source)
            stubbed += [n for n in names if n not in stubbed]
            defining.add(k)
        elif cell.cell_type == "markdown" and MD_BEGIN in cell.source:
            cell.source = strip_markdown(cell.source)
    for k, cell in enumerate(ex.cells):
        if cell.cell_type != "code" or k in defining:
            continue
        if cell.source.lstrip().startswith(CHECK_MARK) or _uses(cell.source, stubbed):
            tags = list(cell.metadata.get("tags", []))
            if RAISES_TAG not in tags:
                tags.append(RAISES_TAG)
            cell.metadata["tags"] = tags
    first_md = next((c for c in ex.cells if c.cell_type == "markdown"), None)
    if first_md is not None and name:
        first_md.source = first_md.source.rstrip() + BANNER.format(name=name)
    return nbtools.clean(ex, keep_checked_outputs=False), stubbed


def solution_paths() -> list[str]:
    return sorted(glob.glob(os.path.join(SOLUTIONS_DIR, "*.ipynb")))


def render(solution_path: str) -> str:
    """The exercise notebook for ``solution_path``, as the exact text that is committed."""
    import nbformat

    nb = nbformat.read(solution_path, as_version=4)
    ex, _ = make_exercise(nb, os.path.basename(solution_path))
    nbformat.validate(ex)
    text = nbformat.writes(ex)
    return text if text.endswith("\n") else text + "\n"   # as nbformat.write (and nbtools) save it


def exercise_path(solution_path: str) -> str:
    return os.path.join(EXERCISES_DIR, os.path.basename(solution_path))


def generate() -> list[str]:
    """Write every exercise notebook; returns the paths written (only those whose text changed)."""
    os.makedirs(EXERCISES_DIR, exist_ok=True)
    written = []
    for sol in solution_paths():
        text, path = render(sol), exercise_path(sol)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            written.append(path)
    return written


def out_of_sync() -> list[str]:
    """Why the committed exercises differ from what ``generate`` would write (empty when in sync)."""
    sols = solution_paths()
    if not sols:
        return [f"no solution notebooks found in {SOLUTIONS_DIR}"]
    problems = []
    for sol in sols:
        path = exercise_path(sol)
        rel = os.path.relpath(path, ROOT)
        if not os.path.exists(path):
            problems.append(f"{rel} is missing")
        elif open(path, encoding="utf-8").read() != render(sol):
            problems.append(f"{rel} is not what {os.path.relpath(sol, ROOT)} generates")
    wanted = {os.path.basename(s) for s in sols}
    for extra in sorted(glob.glob(os.path.join(EXERCISES_DIR, "*.ipynb"))):
        if os.path.basename(extra) not in wanted:
            problems.append(f"{os.path.relpath(extra, ROOT)} has no solution notebook")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("generate", "check"):
        print(__doc__)
        return 2
    if argv[0] == "generate":
        for path in generate():
            print(f"wrote {os.path.relpath(path, ROOT)}")
        return 0
    problems = out_of_sync()
    for p in problems:
        print(p)
    if problems:
        print("exercises/ is not in sync with solutions/: run `python -m mgpu_helpers.tools.exercises generate`")
        return 1
    print(f"exercises/ in sync with {len(solution_paths())} solution notebook(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

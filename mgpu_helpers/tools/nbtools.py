"""Keep the course's notebooks clean: run them, keep only the outputs nbval checks, strip the rest.

    python -m mgpu_helpers.tools.nbtools refresh solutions/00_setup.ipynb ...   # execute, then clean
    python -m mgpu_helpers.tools.nbtools clean  solutions/*.ipynb                # strip without running
    python -m mgpu_helpers.tools.nbtools check  notebooks/*.ipynb                # exit 1 if one is not clean

A clean notebook has no execution counts, no machine-specific metadata, and no outputs except, in solutions/,
those of cells starting ``# NBVAL_CHECK_OUTPUT`` (which nbval compares). Every cell gets slide metadata
(:func:`slide_types`), so each notebook can be presented as it is (RISE, or ``tools.export --slides``).
"""

import copy
import os
import sys
from pathlib import Path

import nbformat

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
# jupyter: source_hidden; nbgrader: the grading metadata of the learner's copies (tools/exercises.py)
KEEP_CELL_METADATA = ("tags", "slideshow", "editable", "deletable", "jupyter", "nbgrader")


def source(cell) -> str:
    """A cell's source as one string (a plain dict may hold a list of lines)."""
    return "".join(cell.get("source", ""))


def markdown_lines(nb):
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            yield from source(cell).splitlines()


def is_checked(cell) -> bool:
    return cell.get("cell_type") == "code" and source(cell).lstrip().startswith(CHECK_MARK)


def keeps_outputs(path: str) -> bool:
    """True for a worked notebook (in ``solutions``): the copies a learner opens keep no outputs."""
    return os.path.basename(os.path.dirname(os.path.abspath(path))) == "solutions"


def read_text(path: str) -> str | None:
    return Path(path).read_text(encoding="utf-8") if os.path.exists(path) else None


def report(problems, fix: str = "") -> int:
    """A check's command-line ending: each problem, then ``fix`` (what to run); the exit status."""
    if problems:
        print(*problems, *([fix] if fix else []), sep="\n")
    return 1 if problems else 0


def write_if_changed(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` unless the file holds it already; True when written."""
    if read_text(path) == text:
        return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_text(text, encoding="utf-8")
    return True


# Lines of source one slide holds before the next cell starts a sub-slide (a 1280x720 projector, large fonts);
# a code cell counts extra lines for its output.
SLIDE_LINES = 18
CODE_OUTPUT_LINES = 6
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
RISE_SETTINGS = {"scroll": True, "width": 1280, "height": 720, "theme": "white", "transition": "none"}


def slide_types(cells) -> list[str]:
    """The slide type of each cell, by a fixed rule (no hand-set metadata to drift): "slide" at the first cell and
    a ``# `` or ``## `` heading, "subslide" at ``### `` or where the slide would pass :data:`SLIDE_LINES`."""
    kinds, used = [], 0
    for i, cell in enumerate(cells):
        text = source(cell).strip()
        heading = text.splitlines()[0].strip() if text and cell.get("cell_type") == "markdown" else ""
        lines = max(1, len(text.splitlines())) + (CODE_OUTPUT_LINES if cell.get("cell_type") == "code" else 0)
        if i == 0 or heading.startswith(("# ", "## ")):
            kind = "slide"
        elif heading.startswith("### ") or (used and used + lines > SLIDE_LINES):
            kind = "subslide"
        else:
            kind = "-"
        used = lines if kind != "-" else used + lines
        kinds.append(kind)
    return kinds


def clean(nb, keep_checked_outputs: bool = True):
    """A cleaned copy of a notebook (a NotebookNode or plain dict)."""
    nb = copy.deepcopy(nb)
    old = nb.get("metadata", {})
    nb["metadata"] = {k: v for k, v in old.items() if k in ("celltoolbar", "mgpu")}
    nb["metadata"] |= {"language_info": {"name": "python"}} if "language_info" in old else {}
    nb["metadata"] |= {"kernelspec": dict(KERNELSPEC), "rise": dict(RISE_SETTINGS)}
    for cell, kind in zip(nb.get("cells", []), slide_types(nb.get("cells", []))):
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k in KEEP_CELL_METADATA}
        cell["metadata"]["slideshow"] = {"slide_type": kind}
        if cell.get("cell_type") != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        cell["outputs"] = cell.get("outputs", []) if keep_checked_outputs and is_checked(cell) else []
        # nbval skips (and with outputs, fails) a reference cell whose execution_count is None:
        # a fixed number marks checked cells as run without recording anything machine-specific.
        cell["execution_count"] = 1 if cell["outputs"] else None
        for out in cell["outputs"]:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = 1
            if "metadata" in out:
                out["metadata"] = {}
    return nbformat.from_dict(nb)  # plain dicts inside (e.g. the copied outputs) break nbformat.write


def problems(path: str) -> list[str]:
    """Why the notebook at ``path`` is not clean."""
    nb = nbformat.read(path, as_version=4)
    want = clean(nb, keep_checked_outputs=keeps_outputs(path))
    if nbformat.writes(nb) != nbformat.writes(want):
        return [f"{path}: not clean; run `python -m mgpu_helpers.tools.nbtools clean {path}`"]
    return []


def execute(path: str, timeout: int = 600):
    """Run a notebook top to bottom in its own folder with this Python's kernel; returns the run notebook.
    The widget state is stored (the static export draws from it; :func:`clean` drops it): without it nbclient 0.11
    raises a KeyError when an ``ipywidgets.Output`` prints (its hook writes into state it did not record)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    where = {"metadata": {"path": os.path.dirname(os.path.abspath(path))}}
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True, resources=where).execute()
    return nb


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("refresh", "clean", "check"):
        print(__doc__)
        return 2
    cmd, paths, bad = argv[0], argv[1:], []
    for path in paths:
        if cmd == "check":
            bad += problems(path)
            continue
        nb = execute(path) if cmd == "refresh" else nbformat.read(path, as_version=4)
        cleaned = clean(nb, keep_checked_outputs=keeps_outputs(path))
        nbformat.validate(cleaned)
        nbformat.write(cleaned, path)
        print(f"{cmd}ed {path}")
    return report(bad)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Export the code a notebook teaches into a generated module of the library: one hand-edited copy, in the cell.

A code cell whose first line is ``#| export`` (nbdev's marker) goes to ``mgpu_helpers/lessons/<name>.py``, the
name from the notebook's metadata ``{"mgpu": {"export": "<name>"}}`` or ``#| export <name>``. The rest of the
course imports the generated module, so the learner edits and re-runs the very code it uses.

    python -m mgpu_helpers.tools.nbexport          # write every generated module
    python -m mgpu_helpers.tools.nbexport --check  # exit 1, naming each module out of date (or exported no more)
"""

import argparse
import glob
import json
import os
import re
import sys

from mgpu_helpers import tracking
from mgpu_helpers.tools.nbtools import markdown_lines, read_text, report, source, write_if_changed

ROOT = str(tracking.ROOT)
LESSONS_DIR = os.path.join("mgpu_helpers", "lessons")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
MARKER = re.compile(r"^#\|\s*export(?:\s+(?P<name>[A-Za-z_]\w*))?\s*$")
HEADER = "# Generated from {notebook} by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file."


class ExportError(ValueError):
    """A notebook's export markers name no module, or one that cannot be written."""


def exported_cells(nb, notebook: str) -> dict[str, list[str]]:
    """Module name -> the exported cells' code (marker line removed)."""
    default = nb.get("metadata", {}).get("mgpu", {}).get("export")
    modules: dict[str, list[str]] = {}
    for k, cell in enumerate(nb.get("cells", [])):
        lines = source(cell).splitlines() if cell.get("cell_type") == "code" else []
        match = MARKER.match(lines[0].strip()) if lines else None
        if not match:
            continue
        if not (name := match.group("name") or default):
            fix = 'add "mgpu": {"export": "<module>"} to its metadata, or write `#| export <module>`'
            what = f"{notebook} cell {k} says `#| export` but the notebook's metadata names no module"
            raise ExportError(f"{what}: {fix}")
        # nbgrader's solution markers are for the learner's version (tools/exercises.py), not the library.
        code = [ln for ln in lines[1:] if ln.strip() not in SOLUTION_MARKERS]
        modules.setdefault(name, []).append("\n".join(code).strip("\n"))
    return modules


def render(notebook: str, nb, cells: list[str]) -> str:
    title = next((line.lstrip("#").strip() for line in markdown_lines(nb) if line.startswith("#")), "")
    about = f" ({title})" if title else ""
    blocks = "Each block below is one `#| export` cell of that notebook, in order."
    doc = f'"""The code taught in {notebook}{about}.\n\n{blocks}"""'
    body = "\n\n\n".join(cells)
    return f"{HEADER.format(notebook=notebook)}\n{doc}\n\n{body}\n"


def lesson_paths(root: str = ROOT) -> list[str]:
    """The worked lessons, in course order (notebooks/ is generated from them)."""
    return sorted(glob.glob(os.path.join(root, "solutions", "[0-9][0-9]_*.ipynb")))


def expected_modules(root: str = ROOT) -> dict[str, tuple[str, str]]:
    """Path of each generated module -> (its notebook, the text it must have)."""
    out: dict[str, tuple[str, str]] = {}
    for path in lesson_paths(root):
        rel = os.path.relpath(path, root)
        nb = json.loads(read_text(path))
        for name, cells in exported_cells(nb, rel).items():
            if (target := os.path.join(LESSONS_DIR, f"{name}.py")) in out:
                raise ExportError(f"{rel} and {out[target][0]} both export to {target}: one notebook per module")
            out[target] = (rel, render(rel, nb, cells))
    return out


def out_of_sync(root: str = ROOT) -> list[str]:
    """One line per generated module that is missing, stale, or no longer exported by any notebook."""
    problems, expected = [], expected_modules(root)
    for rel, (notebook, text) in expected.items():
        if (old := read_text(os.path.join(root, rel))) is None:
            problems.append(f"{rel} is missing: {notebook} exports it")
        elif old != text:
            problems.append(f"{rel} differs from what {notebook} exports")
    on_disk = [os.path.relpath(p, root) for p in sorted(glob.glob(os.path.join(root, LESSONS_DIR, "*.py")))]
    generated = [rel for rel in on_disk if read_text(os.path.join(root, rel)).startswith("# Generated from ")]
    orphans = [rel for rel in generated if rel not in expected]
    return problems + [f"{rel} is generated but no notebook exports it any more: delete it" for rel in orphans]


def write_all(root: str = ROOT) -> list[str]:
    """Write every generated module; returns the paths that changed."""
    return [rel for rel, (_, text) in expected_modules(root).items() if write_if_changed(os.path.join(root, rel), text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mgpu_helpers.tools.nbexport", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report modules that are out of date")
    if parser.parse_args(argv).check:
        return report(out_of_sync(), "run `python -m mgpu_helpers.tools.nbexport` to regenerate")
    for rel in write_all():
        print(f"wrote {rel}")
    return report([p for p in out_of_sync() if p.endswith("delete it")])


if __name__ == "__main__":
    sys.exit(main())

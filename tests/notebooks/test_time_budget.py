"""00_setup's course map gives each notebook the time budget that the notebook's own header gives."""

import glob
import os
import re

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUDGET = re.compile(r"(?:约\s*)?(\d+)(?:\s*[–-]\s*(\d+))?\s*分钟")
HEADER = re.compile(r"(?:建议时长|建议用时|时间预算)\**\s*[：:]\s*\**\s*((?:约\s*)?\d+(?:\s*[–-]\s*\d+)?\s*分钟)")


def _minutes(text: str) -> tuple[int, int]:
    m = BUDGET.search(text)
    assert m, f"no budget in {text!r}"
    low = int(m.group(1))
    return low, int(m.group(2) or low)


def header_budget(path: str) -> tuple[int, int]:
    """(low, high) minutes from the notebook's first Markdown cell."""
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    m = HEADER.search(first.source)
    assert m, f"{os.path.basename(path)}: the first cell gives no 建议时长/建议用时/时间预算 line"
    return _minutes(m.group(1))


def course_map() -> dict[str, tuple[int, int]]:
    """Notebook stem -> (low, high) minutes, from the table of 00_setup."""
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "00_setup.ipynb"), as_version=4)
    rows = {}
    for cell in nb.cells:
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            m = re.match(r"\|\s*\[(\d\d_\w+)\]\(\1\.ipynb\)\s*\|.*\|\s*([^|]+?)\s*\|\s*$", line)
            if m:
                rows[m.group(1)] = _minutes(m.group(2))
    return rows


def test_budget_parsers_read_the_forms_the_notebooks_use():
    assert _minutes("约 35 分钟") == (35, 35) and _minutes("12–15 分钟") == (12, 15)
    assert HEADER.search("**建议用时**：约 25 分钟（含运行）").group(1) == "约 25 分钟"


def test_course_map_agrees_with_every_notebook_header():
    table = course_map()
    notebooks = sorted(glob.glob(os.path.join(ROOT, "notebooks", "[0-9][0-9]_*.ipynb")))
    assert notebooks and set(table) == {os.path.basename(p)[:-6] for p in notebooks}
    wrong = {
        os.path.basename(p)[:-6]: (table[os.path.basename(p)[:-6]], header_budget(p))
        for p in notebooks
        if table[os.path.basename(p)[:-6]] != header_budget(p)
    }
    assert not wrong, f"00_setup's table (minutes) vs the notebook's header: {wrong}"

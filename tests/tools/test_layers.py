"""The parts of mgpu_helpers reach each other in one direction: the layer table of mgpu_helpers/README.md holds.

A part is a package of the library (``launcher``, ``measure``, ...) or a module at its top (``course``,
``hardware``, ``lazy``). A part reaches another by an import statement (absolute or relative, at the top or
inside a function) or by an attribute ``mh.<part>`` / ``mgpu_helpers.<part>`` in code; a top-level name such
as ``mh.run_ranks`` reaches the part that defines it. Strings and docstrings do not count.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "mgpu_helpers"
PACKAGE = "mgpu_helpers"
FREE = {"lazy"}  # every part may use the lazy loader (the README says so)


def part_of(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0][:-3] if len(rel) == 1 else rel[0]


PARTS = sorted({part_of(p) for p in ROOT.rglob("*.py")} - {"__init__"})


def top_level_names() -> dict:
    """``mh.<name>`` -> the part that defines it, from the ``_PUBLIC`` map of ``mgpu_helpers/__init__.py``."""
    tree = ast.parse((ROOT / "__init__.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_PUBLIC":
            public = ast.literal_eval(node.value)
            return {name: module.split(".")[0] for module, names in public.items() for name in names.split()}
    raise AssertionError("mgpu_helpers/__init__.py names no _PUBLIC map")


NAMES = top_level_names()


def target(dotted: list[str]):
    """The part a dotted name ``mgpu_helpers.x.y`` reaches, or None."""
    if len(dotted) < 2 or dotted[0] != PACKAGE:
        return None
    if dotted[1] in PARTS:
        return dotted[1]
    return NAMES.get(dotted[1])


def reached(path: Path) -> dict:
    """{part: first line} of every part ``path`` reaches."""
    module = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    package = module[:-1]  # what a relative import starts from (an __init__'s package is its folder)
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = base + (node.module.split(".") if node.module else [])
            names = [mod + [a.name] for a in node.names] if mod == [PACKAGE] else [mod]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("mh", PACKAGE):
            names = [[PACKAGE, node.attr]]
        for dotted in names:
            part = target(dotted)
            if part is not None:
                out.setdefault(part, node.lineno)
    return out


def actual_edges() -> dict:
    """{(from part, to part): "file:line"} over every module of the library."""
    edges = {}
    for path in sorted(ROOT.rglob("*.py")):
        me = part_of(path)
        if me == "__init__":  # the package's facade names every part lazily, and imports only lazy
            continue
        for other, line in reached(path).items():
            if other != me and other not in FREE:
                edges.setdefault((me, other), f"{path.relative_to(ROOT)}:{line}")
    return edges


def allowed_table() -> dict:
    """The README's layer table: {part: set of parts it may import}."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        part = re.fullmatch(r"`([a-z_]+)(?:\.py|/)`", cells[0])
        assert part, f"the README's layer table names a part it cannot read: {cells[0]}"
        table[part.group(1)] = set(re.findall(r"`([a-z_]+)`", cells[2]))
    return table


ALLOWED = allowed_table()


def test_the_table_names_every_part_and_only_parts():
    assert sorted(ALLOWED) == PARTS
    for part, deps in ALLOWED.items():
        assert deps <= set(PARTS), (part, deps - set(PARTS))


def test_the_table_is_a_dag():
    done, stack = set(), []

    def visit(part):
        if part in stack:
            raise AssertionError("the layer table has a cycle: " + " -> ".join(stack[stack.index(part) :] + [part]))
        if part in done:
            return
        stack.append(part)
        for dep in ALLOWED[part]:
            visit(dep)
        stack.pop()
        done.add(part)

    for part in ALLOWED:
        visit(part)


def test_every_part_reaches_only_what_the_table_allows():
    bad = [
        f"{a} -> {b} ({where})" for (a, b), where in sorted(actual_edges().items()) if b not in ALLOWED.get(a, set())
    ]
    assert not bad, "parts reach what the README's layer table does not allow:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source,expected",
    [
        ("from mgpu_helpers.measure import trace", {"measure"}),
        ("import mgpu_helpers as mh\nmh.models.bandwidth.busbw(1, 2)", {"models"}),
        ("def f():\n    from ..launcher.ranks import rank_device", {"launcher"}),
        ("from .. import course", {"course"}),
        ("import mgpu_helpers as mh\nmh.run_ranks", {"launcher"}),
        ("'''mh.widgets.style in a docstring'''\nx = 'mgpu_helpers.checks'", set()),
    ],
)
def test_the_scan_counts_imports_and_attributes_but_not_strings(tmp_path, monkeypatch, source, expected):
    fake = ROOT / "widgets" / "_layer_probe.py"  # a path inside the library, never written
    monkeypatch.setattr(
        Path,
        "read_text",
        lambda self, encoding=None: source if self == fake else Path.read_bytes(self).decode(encoding or "utf-8"),
    )
    assert set(reached(fake)) - {"widgets"} == expected

"""One copy of each idea: no constant of the library is written out twice.

A table of values (a tuple, list, set or dict of three or more literals) defined at the top of two modules is
the same idea written twice, and the two copies drift (the course once had four ``COLLECTIVES`` and three
``PAD``s). The second place imports the first, or names its own, different, idea differently."""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "mgpu_helpers"


def literal_tables(source: str) -> dict[str, object]:
    """``{name: value}`` of the module-level assignments whose value is a literal table of 3 or more items."""
    found = {}
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        if isinstance(value, (tuple, list, set, frozenset, dict)) and len(value) >= 3:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = value
    return found


def _key(value) -> str:
    return repr(sorted(map(repr, value))) if isinstance(value, (set, frozenset)) else repr(value)


def test_literal_tables_finds_tables_not_aliases_or_small_values():
    source = 'A = ("x", "y", "z")\nB = other.A\nC = (1, 2)\nD: dict = {"a": 1, "b": 2, "c": 3}\ndef f():\n    E = [1, 2, 3]\n'
    assert literal_tables(source) == {"A": ("x", "y", "z"), "D": {"a": 1, "b": 2, "c": 3}}


def test_no_table_of_values_is_written_in_two_modules():
    where = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for name, value in literal_tables(path.read_text(encoding="utf-8")).items():
            where[_key(value)].append(f"{path.relative_to(ROOT.parent)}: {name}")
    twice = [places for places in where.values() if len({p.split(":")[0] for p in places}) > 1]
    assert not twice, "the same table is written in two modules (import it from one):\n" + "\n".join(
        " = ".join(places) for places in twice
    )

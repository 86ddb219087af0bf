"""Generated lesson modules and their notebooks agree; the export marker works as documented."""

import json
import os

import pytest

from mgpu_helpers.tools import nbexport


def test_generated_modules_are_what_the_notebooks_export():
    assert nbexport.out_of_sync() == []


def test_every_generated_module_names_its_notebook_in_its_first_line():
    for rel, (notebook, text) in nbexport.expected_modules().items():
        first = text.splitlines()[0]
        assert first.startswith("# Generated from ") and notebook in first, rel


def _course(tmp_path, cells, metadata=None):
    """A tiny course tree: one worked lesson with the given code cells, and an empty lessons folder."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "mgpu_helpers" / "lessons").mkdir(parents=True)
    nb = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": "# 99 · A lesson"}]
        + [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells],
        "metadata": metadata or {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "solutions" / "99_lesson.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    return tmp_path


def test_marked_cells_go_to_the_module_the_metadata_names_and_others_stay(tmp_path):
    root = _course(
        tmp_path,
        [
            "#| export\ndef f():\n    return 1",
            "x = f()  # not exported",
            "#| export\ndef g():\n    return 2",
            "#| export other\nY = 3",
        ],
        {"mgpu": {"export": "lesson99"}},
    )
    assert sorted(nbexport.write_all(str(root))) == [
        os.path.join("mgpu_helpers", "lessons", "lesson99.py"),
        os.path.join("mgpu_helpers", "lessons", "other.py"),
    ]
    text = (root / "mgpu_helpers" / "lessons" / "lesson99.py").read_text(encoding="utf-8")
    assert text.startswith("# Generated from solutions/99_lesson.ipynb")
    assert "def f()" in text and "def g()" in text and "x = f()" not in text
    assert not any(line.startswith("#|") for line in text.splitlines())
    namespace = {}
    exec(compile(text, "lesson99.py", "exec"), namespace)
    assert namespace["f"]() + namespace["g"]() == 3
    assert nbexport.out_of_sync(str(root)) == []


def test_a_module_edited_by_hand_or_left_behind_is_reported(tmp_path):
    root = _course(tmp_path, ["#| export\nA = 1"], {"mgpu": {"export": "lesson99"}})
    nbexport.write_all(str(root))
    module = root / "mgpu_helpers" / "lessons" / "lesson99.py"
    module.write_text(module.read_text(encoding="utf-8") + "B = 2\n", encoding="utf-8")
    (root / "mgpu_helpers" / "lessons" / "gone.py").write_text("# Generated from notebooks/00_x.ipynb\n")
    (root / "mgpu_helpers" / "lessons" / "hand.py").write_text('"""Hand-written: not ours to judge."""\n')
    problems = nbexport.out_of_sync(str(root))
    assert any("lesson99.py differs from what solutions/99_lesson.ipynb exports" in p for p in problems)
    assert any("gone.py is generated but no notebook exports it" in p for p in problems)
    assert not any("hand.py" in p for p in problems)


def test_a_marker_without_a_module_name_says_what_to_add(tmp_path):
    root = _course(tmp_path, ["#| export\nA = 1"])
    with pytest.raises(nbexport.ExportError, match='"mgpu": {"export"'):
        nbexport.expected_modules(str(root))

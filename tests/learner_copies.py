"""A pytest plugin: nbval runs each learner's copy (notebooks/, exercises/) with its hidden tests put back.

The copy a learner opens holds no outputs and none of the worked notebook's assertions (see
:mod:`mgpu_helpers.tools.exercises`). To test it as it is, nbval runs the version the generator makes before it
leaves those out (:func:`~mgpu_helpers.tools.exercises.tested_version`): the same cells, plus the hidden tests
and, in a lesson, the worked notebook's checked outputs to compare with. That version is only used once the
committed copy is exactly what the worked notebook generates, so what runs is what the learner opens.

Loaded from ``addopts`` in pyproject.toml (``-p learner_copies``). nbval reads a notebook with
``nbformat.read`` inside its collector; the collector here hands it the tested version there instead.
"""

from __future__ import annotations

import os
from unittest import mock

import pytest

LEARNER_FOLDERS = ("notebooks", "exercises")


def solution_of(path) -> str | None:
    """The worked notebook a learner's copy at ``path`` is generated from (None for any other notebook)."""
    path = os.path.abspath(str(path))
    folder, name = os.path.split(path)
    if os.path.basename(folder) not in LEARNER_FOLDERS:
        return None
    sol = os.path.join(os.path.dirname(folder), "solutions", name)
    return sol if os.path.exists(sol) else None


def _learner_copy_file_class():
    from nbval.plugin import IPyNbFile

    class LearnerCopyFile(IPyNbFile):
        """nbval's collector for one learner's copy: the cells of its tested version."""

        def collect(self):
            import nbformat

            from mgpu_helpers.tools import exercises

            sol = solution_of(self.path)
            with open(self.path, encoding="utf-8") as f:
                committed = f.read()
            tested = exercises.tested_version(sol)
            if committed != exercises.render(sol, tested):
                raise self.CollectError(
                    f"{os.path.relpath(self.path)} is not what {os.path.relpath(sol)} generates: "
                    "run `python -m mgpu_helpers.tools.exercises generate`"
                )
            with mock.patch.object(nbformat, "read", lambda *_args, **_kwargs: tested):
                return list(super().collect())

        @staticmethod
        def learner_view(nb):
            """A run of the tested version as the learner's copy would show it (for keep_executed)."""
            from mgpu_helpers.tools import exercises

            return exercises.learner_copy(nb, keep_outputs=True)

    return LearnerCopyFile


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    if solution_of(file_path) is None:
        return collected
    try:
        from nbval.plugin import IPyNbFile
    except ImportError:
        return collected
    cls = _learner_copy_file_class()
    return [cls.from_parent(parent, path=file_path) if type(c) is IPyNbFile else c for c in collected]

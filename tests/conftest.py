"""Fixtures shared by several test modules."""
from __future__ import annotations

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def vendor():
    """reveal.js, MathJax and friends in build/vendor (fetched once with npm); skips, saying why, without npm."""
    from mgpu_helpers.tools import export
    try:
        return export.ensure_vendor(os.path.join(ROOT, "build", "vendor"))
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test drew, so figures do not pile up across the suite."""
    yield
    import sys
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")

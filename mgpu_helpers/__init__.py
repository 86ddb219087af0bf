"""mgpu_helpers: the helper library of the mgpu-course notebooks.

One import line in every notebook::

    import mgpu_helpers as mh
    env = mh.setup()

Importing this package is cheap and imports neither numba, cupy nor torch: Numba's CUDA simulator must be
switched on (by :func:`setup`) before numba is first imported, and the notebook kernel should not pay for
torch until it needs it.
"""
from __future__ import annotations

from .course import CourseEnv, setup
from .errors import LaunchError, RankError, RankTimeout
from .launch import RankResults, run_ranks, shutdown_server
from .projection import projection_mode
from .ranks import rank_device, torchrun_main

__all__ = [
    "CourseEnv",
    "LaunchError",
    "RankError",
    "RankResults",
    "RankTimeout",
    "projection_mode",
    "rank_device",
    "run_ranks",
    "setup",
    "shutdown_server",
    "torchrun_main",
]

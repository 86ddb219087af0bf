"""Measurements: timed sweeps of collectives, workloads of known cost, the recorded tables, diagnostics.

Per-rank spans are the launcher's (``mh.trace``); the lessons' own code run on ranks is in ``mh.runs``."""
from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)

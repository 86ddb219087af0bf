"""Measurements: timed sweeps of collectives, per-rank spans, workloads of known cost, diagnostics."""
from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__, submodules=["collectives", "diagnose", "sweep", "trace", "workloads"])

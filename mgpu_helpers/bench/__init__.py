"""Measured benchmarks: ``python -m mgpu_helpers.bench {launch,kernels,collectives}``.

Each prints its figures side by side with a baseline measured in the same run."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)

"""Pure models (no I/O, no torch): communication costs, bandwidth, memory per rank, topology."""

from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)

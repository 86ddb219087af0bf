"""Pure performance arithmetic (no I/O, no torch): bandwidth formulas, cost models, memory per rank.

Bandwidth follows NVIDIA nccl-tests (doc/PERFORMANCE.md): ``algbw = bytes / time``, and ``busbw`` scales
algbw by the fraction of the data each rank must move over its links, so that busbw is comparable with the
link bandwidth whatever the number of ranks:

=================  ================================
all_reduce         busbw = algbw * 2 (n - 1) / n
reduce_scatter     busbw = algbw * (n - 1) / n
all_gather         busbw = algbw * (n - 1) / n
broadcast, reduce  busbw = algbw
send/recv          busbw = algbw
=================  ================================

For all_gather and reduce_scatter, ``nbytes`` is the size of the whole (gathered / unreduced) buffer,
as nccl-tests counts it.
"""
from __future__ import annotations

BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second: the message size over the time of the operation."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds


def busbw(op: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in bytes per second, by the nccl-tests formulas (see the module docstring)."""
    if op not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {op!r}; one of {sorted(BUSBW_FACTORS)}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return algbw(nbytes, seconds) * BUSBW_FACTORS[op](world_size)

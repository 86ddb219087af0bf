"""Bandwidth by the nccl-tests formulas, and the bytes each collective moves and leaves on each rank (pure).
NVIDIA nccl-tests (doc/PERFORMANCE.md) reports ``algbw = bytes / time`` and ``busbw``: algbw times the share of
the data each rank moves over its links (:data:`BUSBW_FACTORS`), so that it compares with a link's bandwidth.
For all_gather and reduce_scatter, ``nbytes`` is the whole (gathered / unreduced) buffer, as nccl-tests counts it."""

BUSBW_FACTORS = {
    "all_reduce": lambda world_size: 2 * (world_size - 1) / world_size,
    "reduce_scatter": lambda world_size: (world_size - 1) / world_size,
    "all_gather": lambda world_size: (world_size - 1) / world_size,
} | dict.fromkeys(("broadcast", "reduce", "sendrecv"), lambda world_size: 1.0)


def check_world_size(world_size) -> None:
    if isinstance(world_size, bool) or int(world_size) != world_size or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")


def _known(op: str, world_size: int) -> None:
    if op not in BUSBW_FACTORS:
        raise ValueError(f"unknown collective {op!r}; one of {sorted(BUSBW_FACTORS)}")
    check_world_size(world_size)


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds


def busbw(op: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in bytes per second, by the nccl-tests formulas (see the module docstring)."""
    _known(op, world_size)
    return algbw(nbytes, seconds) * BUSBW_FACTORS[op](world_size)


def bytes_sent_per_rank(op: str, nbytes: float, world_size: int) -> float:
    """Bytes each rank sends in a ring (or pipelined chain): the busbw factor times ``nbytes``."""
    _known(op, world_size)
    return 0.0 if world_size == 1 else BUSBW_FACTORS[op](world_size) * nbytes


def result_bytes_per_rank(op: str, nbytes: float, world_size: int, rank: int = 0, root: int = 0) -> float:
    """Bytes of result rank ``rank`` holds afterwards (the memory its output needs)."""
    if op in ("all_reduce", "all_gather", "broadcast"):
        return float(nbytes)
    if op == "reduce":
        return float(nbytes) if rank == root else 0.0
    if op == "reduce_scatter":
        return nbytes / world_size
    raise ValueError(f"unknown collective {op!r}")

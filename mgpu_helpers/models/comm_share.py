"""The share of a training step spent communicating, and what shrinking it buys (pure arithmetic).

With the compute time ``C`` of a step fixed and communication taking a share ``s`` of the step (nothing
overlapped), a step lasts ``C / (1 - s)``: communication is ``s / (1 - s)`` of the compute time.
"""


def _check_share(share: float) -> float:
    if not 0 <= share < 1:
        raise ValueError(f"a share of the step must be in [0, 1), got {share}: e.g. 0.3 for 30%")
    return float(share)


def comm_share_speedup(share_before: float, share_after: float) -> float:
    """How much faster a step gets when communication drops from ``share_before`` to ``share_after`` of the
    step while compute stays the same: ``(1 - after) / (1 - before)``; 30% -> 10% gives 0.9 / 0.7 = 1.29x."""
    return (1 - _check_share(share_after)) / (1 - _check_share(share_before))

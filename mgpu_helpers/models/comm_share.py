"""The share of a training step spent communicating, and what shrinking it buys (pure arithmetic)."""


def comm_share_speedup(share_before: float, share_after: float) -> float:
    """How much faster a step gets when communication drops from ``share_before`` to ``share_after`` of the
    step while compute stays the same (a step of compute C lasts C / (1 - share)): 30% -> 10% gives 0.9 / 0.7."""
    for share in (share_after, share_before):
        if not 0 <= share < 1:
            raise ValueError(f"a share of the step must be in [0, 1), got {share}: e.g. 0.3 for 30%")
    return (1 - share_after) / (1 - share_before)

"""Speed-up of measured or modelled step times (pure; the step-time model is notebook 08's)."""


def speedup(t1_s: float, tn_s: float) -> float:
    """Speed-up ``t1_s / tn_s`` (two GPUs at 250 ms against one at 400 ms: ``speedup(0.400, 0.250) == 1.6``)."""
    if tn_s <= 0:
        raise ValueError(f"tn_s must be positive, got {tn_s}")
    return t1_s / tn_s

"""Alpha-beta costs of the ring collectives by name, and fitting alpha and beta to measured times (pure).

The cost formulas themselves are taught in notebook 08 and exported from there to
:mod:`mgpu_helpers.lessons.cost_model` (``ring_allreduce_seconds`` and friends); this module only looks them up
by collective name and fits their two parameters to measurements, without writing the formulas a second time.
``nbytes`` follows nccl-tests: the buffer on each rank for all_reduce, the whole (unreduced / gathered) buffer
for reduce_scatter and all_gather.
"""
from __future__ import annotations

from mgpu_helpers.lessons import cost_model

RING_COSTS = {
    "all_reduce": cost_model.ring_allreduce_seconds,
    "reduce_scatter": cost_model.ring_reduce_scatter_seconds,
    "all_gather": cost_model.ring_all_gather_seconds,
}


def _cost(op: str):
    if op not in RING_COSTS:
        raise ValueError(f"no ring model for {op!r}; one of {sorted(RING_COSTS)}")
    return RING_COSTS[op]


def collective_seconds(op: str, nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """Alpha-beta ring cost in seconds of ``op`` ("all_reduce", "reduce_scatter" or "all_gather")."""
    return _cost(op)(nbytes, world_size, alpha, beta)


def ring_terms(op: str, nbytes: float, world_size: int) -> tuple[float, float]:
    """(multiplier of alpha, multiplier of beta) in the ring cost of ``op``.

    The cost is linear in alpha and beta, so the multipliers are the cost at (alpha, beta) = (1, 0) and (0, 1).
    """
    cost = _cost(op)
    return cost(nbytes, world_size, 1.0, 0.0), cost(nbytes, world_size, 0.0, 1.0)


def fit_alpha_beta(op: str, nbytes: list, seconds: list, world_size: int,
                   relative: bool = False) -> tuple[float, float]:
    """Least-squares ``(alpha, beta)`` of the ring model for measured ``seconds`` at message sizes ``nbytes``.

    ``nbytes`` and ``seconds`` are sequences of the same length (at least two different sizes) measured
    with ``world_size`` >= 2 ranks. ``relative=True`` minimises relative errors (each point weighted by 1/t^2),
    so small messages (latency) count as much as big ones (bandwidth); the default minimises absolute errors,
    dominated by the biggest messages. Negative estimates (noise on tiny messages) are clipped to 0.
    """
    _cost(op)
    if world_size < 2:
        raise ValueError("fitting needs world_size >= 2 ranks: with one rank nothing is sent")
    if len(nbytes) != len(seconds) or len(set(nbytes)) < 2:
        raise ValueError("need matching lists with at least two different message sizes")
    rows = [ring_terms(op, b, world_size) for b in nbytes]
    if relative:   # divide each equation by its measured time: t/t = 1 = a x/t + b y/t
        rows = [(x / t, y / t) for (x, y), t in zip(rows, seconds)]
        seconds = [1.0] * len(seconds)
    # Normal equations of t = a * x + b * y (two unknowns, no intercept).
    sxx = sum(x * x for x, _ in rows)
    sxy = sum(x * y for x, y in rows)
    syy = sum(y * y for _, y in rows)
    sxt = sum(x * t for (x, _), t in zip(rows, seconds))
    syt = sum(y * t for (_, y), t in zip(rows, seconds))
    det = sxx * syy - sxy * sxy
    alpha = (sxt * syy - syt * sxy) / det
    beta = (syt * sxx - sxt * sxy) / det
    if alpha < 0:   # refit beta alone through the origin
        alpha, beta = 0.0, syt / syy
    if beta < 0:
        alpha, beta = sxt / sxx, 0.0
    return alpha, beta

"""Speed-up and scaling efficiency, and modelled strong / weak scaling tables (pure).

The step-time model (``step_seconds``) and the ring all-reduce cost are taught in notebook 08 and come from
:mod:`mgpu_helpers.lessons.cost_model`; this module turns them into ratios and tables over world sizes.
"""
from __future__ import annotations

from mgpu_helpers.lessons import cost_model


def speedup(t1_s: float, tn_s: float) -> float:
    """Speed-up ``t1_s / tn_s`` (two GPUs at 250 ms against one at 400 ms: ``speedup(0.400, 0.250) == 1.6``)."""
    if tn_s <= 0:
        raise ValueError(f"tn_s must be positive, got {tn_s}")
    return t1_s / tn_s


def strong_scaling_efficiency(t1_s: float, tn_s: float, world_size: int) -> float:
    """Strong scaling (same total problem on world_size ranks): ``t1 / (world_size * tn)``; 1.0 is perfect."""
    return speedup(t1_s, tn_s) / world_size


def weak_scaling_efficiency(t1_s: float, tn_s: float) -> float:
    """Weak scaling (problem grows with the ranks, same work per rank): ``t1 / tn``; 1.0 is perfect."""
    return speedup(t1_s, tn_s)


def strong_scaling(compute_s: float, world_sizes, nbytes: float, alpha: float, beta: float) -> list[dict]:
    """Model of strong scaling: a fixed job (``compute_s`` on one GPU) plus a ring all-reduce of ``nbytes``.

    One dict per world size with keys world_size, compute_s, comm_s, step_s, speedup, efficiency.
    """
    t1 = cost_model.step_seconds(compute_s, 1)
    rows = []
    for world_size in world_sizes:
        comm = cost_model.ring_allreduce_seconds(nbytes, world_size, alpha, beta)
        t = cost_model.step_seconds(compute_s, world_size, comm)
        rows.append(dict(world_size=world_size, compute_s=compute_s / world_size, comm_s=comm, step_s=t,
                         speedup=speedup(t1, t), efficiency=strong_scaling_efficiency(t1, t, world_size)))
    return rows


def weak_scaling(compute_per_rank_s: float, world_sizes, nbytes: float, alpha: float, beta: float) -> list[dict]:
    """Model of weak scaling: each rank keeps ``compute_per_rank_s`` of work, plus a ring all-reduce.

    One dict per world size with keys world_size, compute_s, comm_s, step_s, efficiency.
    """
    rows = []
    for world_size in world_sizes:
        comm = cost_model.ring_allreduce_seconds(nbytes, world_size, alpha, beta)
        t = compute_per_rank_s + comm
        rows.append(dict(world_size=world_size, compute_s=compute_per_rank_s, comm_s=comm, step_s=t,
                         efficiency=weak_scaling_efficiency(compute_per_rank_s, t)))
    return rows


def slower_with_one_more(compute_s: float, world_size: int, nbytes: float, alpha: float, beta: float) -> bool:
    """True when going from world_size to world_size + 1 ranks makes the modelled strong-scaling step slower.

    The compute saved, ``compute/w - compute/(w+1)``, is smaller than the extra communication: two more ring
    steps (``2 alpha``) and a slightly larger bandwidth term.
    """
    def step(w):
        return cost_model.step_seconds(compute_s, w, cost_model.ring_allreduce_seconds(nbytes, w, alpha, beta))
    return step(world_size + 1) > step(world_size)

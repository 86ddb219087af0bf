# Generated from solutions/08_stragglers_scaling.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/08_stragglers_scaling.ipynb (08 Straggler、拓扑与扩展效率：最慢的路径决定速度).

Each block below is one `#| export` cell of that notebook, in order."""

def straggler_waits(shard_units, seconds_per_unit):
    """Model of the wait at the collective: every rank leaves the barrier together, rank r arrives after
    shard_units[r] * seconds_per_unit and waits for the slowest, (max - own) * seconds_per_unit seconds."""
    slowest = max(shard_units)
    return [(slowest - units) * seconds_per_unit for units in shard_units]


def straggler_step_seconds(shard_units, seconds_per_unit, comm_s=0.0):
    """A synchronous step with uneven shards: the biggest shard sets the pace, then all ranks communicate."""
    return max(shard_units) * seconds_per_unit + comm_s


def check_ring(nbytes, world_size, alpha, beta):
    """Refuse inputs the alpha-beta model has no meaning for, saying what is wrong."""
    if isinstance(world_size, bool) or int(world_size) != world_size or world_size < 1:
        raise ValueError(f"world_size (number of ranks) must be a whole number >= 1, got {world_size!r}")
    if nbytes < 0 or alpha < 0 or beta < 0:
        raise ValueError(f"nbytes, alpha and beta must be >= 0, got {nbytes}, {alpha}, {beta}")


def ring_reduce_scatter_seconds(nbytes, world_size, alpha, beta):
    """Ring reduce-scatter of an nbytes buffer: each step costs alpha plus the bytes one rank sends times beta."""
    check_ring(nbytes, world_size, alpha, beta)
    # ✎ 几步？每步每个 Rank 发一块，一块多少字节？
    steps = world_size - 1
    return steps * alpha + steps * (nbytes / world_size) * beta


def ring_all_gather_seconds(nbytes, world_size, alpha, beta):
    """Ring all-gather into an nbytes buffer: the same steps and bytes as reduce-scatter."""
    return ring_reduce_scatter_seconds(nbytes, world_size, alpha, beta)


def ring_allreduce_seconds(nbytes, world_size, alpha, beta):
    """Ring all-reduce = reduce-scatter then all-gather (0 s on one rank: nothing to send)."""
    return ring_reduce_scatter_seconds(nbytes, world_size, alpha, beta) + ring_all_gather_seconds(
        nbytes, world_size, alpha, beta
    )


def step_seconds(compute_s, world_size, comm_s=0.0, overhead_s=0.0):
    """One synchronous step on world_size ranks: compute_s (the whole job on one GPU) split evenly,
    plus communication and overhead (an uneven split is paced by its biggest shard: straggler_step_seconds)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return compute_s / world_size + comm_s + overhead_s

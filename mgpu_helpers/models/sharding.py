"""Order-keeping balanced assignment of work: consecutive runs of items, cut by their running cost (pure).

The sharding rules a lesson is about (contiguous ranges, ``shard``, assignment by cost with LPT, the load of
each rank) are taught in notebook 06 and exported to :mod:`mgpu_helpers.lessons.sharding_rules`. What stays
here is the variant no lesson teaches: when items must stay in order (a sequence, a stack of layers), cut the
list into consecutive runs of roughly equal cost instead of dealing items out.

Vocabulary (one name per meaning): a rank's **shard** is the part it owns; an **assignment** is the list of
every rank's item indices; a rank's **load** is the summed cost of its items.
"""

import numpy as np


def assign_contiguous_by_cost(costs, world_size: int) -> list[list[int]]:
    """Consecutive runs of item indices, one run per rank, cut where the running cost crosses
    ``k * total / world_size``. Keeps the items' order; ``max load <= total / world_size + max(costs)``.

    With all costs 0 it splits by count, the first ``len(costs) % world_size`` runs one item longer.
    """
    costs = [float(c) for c in costs]
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if any(c < 0 for c in costs):
        raise ValueError("costs must be >= 0")
    total = sum(costs)
    if total == 0:   # nothing to balance: split by count
        return [part.tolist() for part in np.array_split(np.arange(len(costs)), world_size)]
    assignment = [[] for _ in range(world_size)]
    running, rank = 0.0, 0
    for i, c in enumerate(costs):
        # Move to the next rank once the running total has reached this rank's target boundary.
        while rank < world_size - 1 and running >= (rank + 1) * total / world_size:
            rank += 1
        assignment[rank].append(i)
        running += c
    return assignment

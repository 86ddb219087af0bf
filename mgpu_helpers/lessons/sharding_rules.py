# Generated from solutions/06_ownership_capacity.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/06_ownership_capacity.ipynb (06 所有权与容量：多 GPU 扩展从“谁拥有什么”开始).

Each block below is one `#| export` cell of that notebook, in order."""

def contiguous_ranges(n_items, world_size):
    """Split the indices 0..n_items-1 into world_size contiguous ranges, one per rank.

    Sizes differ by at most one (the first n_items % world_size ranges get one item more); no index is
    left out or given twice, and every rank computes the same split from the same two numbers.
    """
    if world_size < 1 or n_items < 0:
        raise ValueError(f"need world_size >= 1 and n_items >= 0, got world_size={world_size}, n_items={n_items}")
    # ✎ 一段接一段地排：每一段从上一段的终点开始
    base, extra = divmod(n_items, world_size)
    ranges, start = [], 0
    for rank in range(world_size):
        stop = start + base + (1 if rank < extra else 0)  # the first `extra` ranks take one more
        ranges.append(range(start, stop))
        start = stop
    return ranges


def shard(items, rank, world_size):
    """The items `rank` owns: its contiguous range of `items` (the chapter's `local = shard(dataset, rank, world_size)`)."""
    items = list(items)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    return [items[i] for i in contiguous_ranges(len(items), world_size)[rank]]


def assign_by_cost(costs, world_size):
    """Assign item indices to world_size ranks so that their summed costs are close (LPT greedy).

    Biggest item first, each to the rank with the smallest load so far; ties go to the smaller item index
    and the smaller rank, so every rank computes the same assignment. Returns one sorted list of indices per
    rank; each index appears exactly once, and max load <= sum(costs) / world_size + max(costs).
    """
    costs = [float(c) for c in costs]
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if any(c < 0 for c in costs):
        raise ValueError("costs must be >= 0")
    loads = [0.0] * world_size
    assignment = [[] for _ in range(world_size)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        assignment[rank].append(i)
        loads[rank] += costs[i]
    return [sorted(a) for a in assignment]


def assignment_loads(costs, assignment):
    """Each rank's load: the summed cost of the item indices assigned to it."""
    return [sum(float(costs[i]) for i in indices) for indices in assignment]

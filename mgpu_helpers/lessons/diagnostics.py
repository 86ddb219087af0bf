# Generated from solutions/10_diagnostics.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/10_diagnostics.ipynb (10 诊断手册：从症状到证据).

Each block below is one `#| export` cell of that notebook, in order."""

import mgpu_helpers as mh


def skipped_collective(rank, world_size):
    """Two good all-reduces, then every rank but the last all-reduces a third time while the last rank skips it
    and goes on to the broadcast that follows: its third collective is another one. Hangs."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)  # on the CPU (gloo) even on a GPU machine: the host blocks
    dist.all_reduce(t)
    dist.all_reduce(t)
    if rank != world_size - 1:
        dist.all_reduce(t)  # the last rank skips this one ...
    dist.broadcast(t, src=0)  # ... and its third collective is this broadcast
    return t


def mismatched_order(rank, world_size):
    """One good all-reduce, then rank 0 calls all_reduce -> broadcast while the others call
    broadcast -> all_reduce: the same collectives in a different order. Hangs (or, under
    TORCH_DISTRIBUTED_DEBUG=DETAIL, raises torch's mismatch report)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    dist.all_reduce(t)  # every rank, same call: completes
    if rank == 0:
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
    else:
        dist.broadcast(t, src=0)
        dist.all_reduce(t)
    return t


def mismatched_count(rank, world_size):
    """One good all-reduce, then every rank all-reduces a buffer of 4 + rank elements:
    the same collective with a different count on each rank."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(4))
    t = torch.ones(4 + rank)
    dist.all_reduce(t)
    return t


def matched(rank, world_size):
    """The fixed version: every rank calls the same collectives, in the same order, with the same count."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    dist.all_reduce(t)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    return {"rank": rank, "value": float(t[0])}

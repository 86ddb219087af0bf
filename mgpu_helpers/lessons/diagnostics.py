# Generated from solutions/10_diagnostics.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/10_diagnostics.ipynb (10 诊断手册：从症状到证据).

Each block below is one `#| export` cell of that notebook, in order."""

import mgpu_helpers as mh


def mismatched_order(rank, world_size, verbose=True):
    """One good all-reduce, then rank 0 calls all_reduce -> broadcast while the others call
    broadcast -> all_reduce: the same collectives in a different order. Hangs (or, under
    TORCH_DISTRIBUTED_DEBUG=DETAIL, raises torch's mismatch report)."""
    import torch

    log = mh.measure.diagnose.CollectiveLog(verbose)
    t = torch.ones(4)                       # on the CPU (gloo) even on a GPU machine: the host blocks
    log.all_reduce(t)                       # seq 0: every rank, same call: completes
    if rank == 0:
        log.all_reduce(t)                   # seq 1 on rank 0 ...
        log.broadcast(t, src=0)
    else:
        log.broadcast(t, src=0)             # ... but seq 1 on the others
        log.all_reduce(t)
    return t


def mismatched_count(rank, world_size, verbose=True):
    """One good all-reduce, then every rank all-reduces a buffer of 4 + rank elements:
    the same collective with a different count on each rank."""
    import torch

    log = mh.measure.diagnose.CollectiveLog(verbose)
    log.all_reduce(torch.ones(4))
    t = torch.ones(4 + rank)
    log.all_reduce(t)
    return t


def matched(rank, world_size, verbose=True):
    """The fixed version: every rank calls the same collectives, in the same order, with the same count."""
    import torch

    log = mh.measure.diagnose.CollectiveLog(verbose)
    t = torch.ones(4)
    log.all_reduce(t)
    log.all_reduce(t)
    log.broadcast(t, src=0)
    return {"rank": rank, "collectives": log.seq, "value": float(t[0])}

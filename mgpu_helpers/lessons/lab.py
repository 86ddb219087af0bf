# Generated from solutions/12_lab_allreduce.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/12_lab_allreduce.ipynb (12 可选实践实验：两个 Rank 的所有权检查与 All-Reduce).

Each block below is one `#| export` cell of that notebook, in order."""

import torch
import torch.distributed as dist

import mgpu_helpers as mh


def ownership_check(rank, world_size, data):
    """Steps 1-2 of the lab on one rank: own a contiguous piece of data, sum its squares, all-reduce the sum,
    compare with the whole input's sum of squares. Returns one report row (a dict)."""
    n = len(data)
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    stop = start + base + (1 if rank < extra else 0)
    mine = data[start:stop].to(mh.rank_device())
    local = (mine ** 2).sum().reshape(1)
    buf = local.clone()                     # the all-reduce works in place: keep local as it was
    dist.all_reduce(buf)
    result = float(buf.item())              # .item(): the host waits until the all-reduce has written buf
    expected = float((data ** 2).sum())
    return {"rank": rank, "device": str(buf.device), "shard": (start, stop), "local": float(local.item()),
            "result": result, "expected": expected, "ok": result == expected}


def bus_bandwidth(op, nbytes, seconds, world_size):
    """(algbw, busbw) in GB/s of one collective that moved nbytes in seconds on world_size ranks (nccl-tests)."""
    factor = {"all_reduce": 2 * (world_size - 1) / world_size,
              "reduce_scatter": (world_size - 1) / world_size,
              "all_gather": (world_size - 1) / world_size}[op]
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * factor

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
    local = (mine**2).sum().reshape(1)
    buf = local.clone()  # the all-reduce works in place: keep local as it was
    dist.all_reduce(buf)
    result = float(buf.item())  # .item(): the host waits until the all-reduce has written buf
    expected = float((data**2).sum())
    return {
        "rank": rank,
        "device": str(buf.device),
        "shard": (start, stop),
        "local": float(local.item()),
        "result": result,
        "expected": expected,
        "ok": result == expected,
    }


def rs_ag_busbw(nbytes, seconds, world_size):
    """Bus bandwidth (bytes/s) of a ring reduce-scatter or all-gather of an nbytes buffer (nccl-tests' size) that
    took seconds on world_size ranks: the bytes each rank sends, per second."""
    # ✎ 每个 Rank 在环上发出多少字节？
    sent = (world_size - 1) * (nbytes / world_size)  # n - 1 steps, one piece of nbytes / n each
    return sent / seconds


def compare_rank(rank, world_size, nbytes):
    """Rank function: all-reduce, out-of-place and in-place reduce-scatter + all-gather of the same random
    float32 gradient of about nbytes. Returns {"same", "max_diff", "peak_bytes"}: whether the three agree on
    this rank, their largest difference, and per approach the CUDA bytes allocated beyond the gradient
    during it (None on the CPU)."""
    device = mh.rank_device()
    n = mh.report.sizes.float32_elements(int(nbytes), world_size)
    piece = n // world_size
    grad = torch.randn(n, generator=torch.Generator().manual_seed(1234 + rank)).to(device)
    peaks = {} if device.type == "cuda" else None
    rs, ag = mh.measure.sweep.reduce_scatter_flat, mh.measure.sweep.all_gather_flat

    def measured(name, fn):
        buf = grad.clone()  # allocated before the peak is reset: only the extra counts
        if peaks is None:
            fn(buf)
            return buf
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn(buf)
        torch.cuda.synchronize(device)
        peaks[name] = torch.cuda.max_memory_allocated(device) - base
        return buf

    def rs_ag_out_of_place(buf):
        part = torch.empty(piece, device=device)
        rs(part, buf)  # this rank's slice of the sum, in a buffer of its own
        ag(buf, part)  # every slice, back into the full buffer

    def rs_ag_in_place(buf):
        mine = buf[rank * piece : (rank + 1) * piece]  # a view: no new memory
        rs(mine, buf)  # in place: the summed slice lands where this rank's slice was
        ag(buf, mine)  # in place: sends from that slice, fills the others

    a = measured("all_reduce", dist.all_reduce)
    b = measured("rs_ag_out_of_place", rs_ag_out_of_place)
    c = measured("rs_ag_in_place", rs_ag_in_place)
    same = all(torch.allclose(a, x, rtol=1e-5, atol=1e-6) for x in (b, c))
    return {"same": same, "max_diff": float(max((a - b).abs().max(), (a - c).abs().max())), "peak_bytes": peaks}

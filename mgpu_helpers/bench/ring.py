"""The hand-written ring all-reduce against ``dist.all_reduce``: time and busbw over message sizes.

    python -m mgpu_helpers.bench ring --world-size 4 --sizes 1K,64K,4M --iters 10 --pieces 1,2

The slowest rank's time is the one reported, busbw as nccl-tests counts it; every size is also checked: the
ring's result must equal ``dist.all_reduce``'s.
"""

from mgpu_helpers import hardware
from mgpu_helpers.bench import arguments
from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.models.bandwidth import busbw
from mgpu_helpers.report.sizes import parse_size
from mgpu_helpers.report.tables import format_table as text_table

GPU_SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
CPU_SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20]
RING_COLUMNS = [("bytes", "bytes", "{}"), ("dist_us", "all_reduce us", "{:.1f}")]
RING_COLUMNS += [("dist_busbw", "busbw GB/s", "{:.2f}"), ("pieces", "pieces", "{}"), ("ring_us", "ring us", "{:.1f}")]
RING_COLUMNS += [("ring_busbw", "busbw GB/s", "{:.2f}"), ("share", "ring/dist", "{:.0%}"), ("ok", "same result", "{}")]


def _rank_fn(rank, world_size, sizes, iters, warmup, pieces_list):
    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device
    from mgpu_helpers.lessons.ring import ring_all_reduce
    from mgpu_helpers.measure.timing import time_batch

    dev = rank_device()

    def slowest_rank_seconds(run, x):
        seconds = time_batch(lambda: run(x), iters, warmup, dev)
        slowest = torch.tensor([seconds], dtype=torch.float64, device=dev)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
        return slowest.item()

    rows = []
    g = torch.Generator().manual_seed(1234 + rank)
    for nbytes in sizes:
        numel = max(1, nbytes // 4)
        # Correctness first, on random data.
        x = torch.randn(numel, generator=g).to(dev)
        ref = x.clone()
        dist.all_reduce(ref)
        ring_all_reduce(x, pieces=pieces_list[0])
        ok = bool(torch.allclose(x, ref, rtol=1e-5, atol=1e-5))
        del ref
        # Timing on zeros: repeated in-place sums stay finite, and the bytes moved are the same.
        x.zero_()
        t_dist = slowest_rank_seconds(lambda t: dist.all_reduce(t), x)
        t_ring = {p: slowest_rank_seconds(lambda t, p=p: ring_all_reduce(t, pieces=p), x) for p in pieces_list}
        rows.append((numel * 4, t_dist, t_ring, ok))
        del x
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def measure(world_size=2, sizes=None, iters=None, warmup=3, pieces=(1,), backend="auto", timeout=300.0):
    """``(backend, rows)``, each row ``(nbytes, seconds_dist, {pieces: seconds_ring}, ring_equals_dist)``."""
    chosen, _ = hardware.choose_backend(world_size, backend)
    gpu = chosen == "nccl"
    sizes = list(sizes or (GPU_SIZES if gpu else CPU_SIZES))
    iters = iters or (20 if gpu else 5)
    args = (sizes, iters, warmup, list(pieces))
    res = run_ranks(_rank_fn, world_size, args=args, backend=chosen, timeout=timeout, stream=False, quiet=True)
    return res.backend, res.values[0]


def format_table(world_size: int, rows) -> str:
    lines = []
    for nbytes, t_dist, t_ring, ok in rows:
        bw_dist = busbw("all_reduce", nbytes, t_dist, world_size) / 1e9
        for p, t in t_ring.items():
            bw = busbw("all_reduce", nbytes, t, world_size) / 1e9
            row = dict(bytes=nbytes, dist_us=t_dist * 1e6, dist_busbw=bw_dist, pieces=p, ring_us=t * 1e6)
            lines.append(row | dict(ring_busbw=bw, share=bw / bw_dist, ok=ok))
    return text_table(lines, RING_COLUMNS)


def main(argv: list[str]) -> int:
    ap = arguments("ring", __doc__)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--sizes", default=None, help="comma-separated sizes in bytes, e.g. 1K,4M,256M")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--pieces", default="1,2", help="comma-separated values of ring_all_reduce(pieces=...)")
    ap.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    a = ap.parse_args(argv)
    sizes = [parse_size(s) for s in a.sizes.split(",")] if a.sizes else None
    pieces = [int(p) for p in a.pieces.split(",")]
    backend, rows = measure(a.world_size, sizes, a.iters, a.warmup, pieces, a.backend)
    print(f"ring all-reduce vs dist.all_reduce, {a.world_size} ranks, backend {backend}, float32")
    print(format_table(a.world_size, rows))
    return 0 if all(ok for *_x, ok in rows) else 1

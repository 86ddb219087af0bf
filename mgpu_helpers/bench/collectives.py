"""``python -m mgpu_helpers.bench collectives``: collective bandwidth over message sizes, next to nccl-tests'
busbw recorded on 2 x H200 where the sizes match (NCCL, 2 ranks).

    python -m mgpu_helpers.bench collectives                         # all GPUs (or 2 gloo ranks)
    python -m mgpu_helpers.bench collectives --world-size 2 --min-bytes 64M --max-bytes 1G --check
    python -m mgpu_helpers.bench collectives --record-nccl-debug nccl_debug.txt   # NCCL_DEBUG=INFO lines
"""

from mgpu_helpers import hardware
from mgpu_helpers.bench import arguments
from mgpu_helpers.measure import diagnose, sweep
from mgpu_helpers.report import nccltests, sizes

TARGET_FROM = 64 << 20  # busbw must be within 5% of nccl-tests from this size up
TARGET_RATIO = 0.95


def target_check(rows) -> list[str]:
    return [
        f"{d['op']} {d['size']}: {d['busbw']:.1f} GB/s vs nccl-tests {d['ref_busbw']:.1f} ({d['ratio']:.2f})"
        for d in nccltests.compare_with_reference(rows)
        if d["ratio"] is not None and d["nbytes"] >= TARGET_FROM and d["ratio"] < TARGET_RATIO
    ]


def record_nccl_debug(path: str, world_size: int) -> int:
    if not (lines := diagnose.nccl_debug_lines(world_size)):
        print("no NCCL lines: this needs NCCL ranks (one GPU per rank).")
        return 1
    head = "# Recorded: NCCL_DEBUG=INFO output of a 2-rank all-reduce (python -m mgpu_helpers.bench collectives"
    with open(path, "w") as f:
        f.write(head + " --record-nccl-debug)\n" + "\n".join(lines) + "\n")
    print(f"{len(lines)} lines written to {path}")
    return 0


def main(argv: list[str]) -> int:
    gpus = hardware.machine().gpu_count
    p = arguments("collectives", __doc__)
    p.add_argument("--world-size", type=int, default=max(2, gpus), help="ranks (default: every GPU, at least 2)")
    p.add_argument("--backend", default="auto", choices=("auto", "nccl", "gloo"))
    p.add_argument("--min-bytes", type=sizes.parse_size, default=None, help="smallest message (default 1K)")
    largest = "largest message (default 1G with NCCL, 1M with gloo)"
    p.add_argument("--max-bytes", type=sizes.parse_size, default=None, help=largest)
    p.add_argument("--factor", type=int, default=None, help="size step (default 4 with NCCL, 32 with gloo)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per size (default: by size)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--ops", default=",".join(sweep.OPS), help="comma-separated, from " + ",".join(sweep.OPS))
    check = "exit 1 if busbw is more than 5%% below nccl-tests at 64 MiB and above"
    p.add_argument("--check", action="store_true", help=check)
    record = "instead of the sweep, record NCCL_DEBUG=INFO lines of one all-reduce to PATH"
    p.add_argument("--record-nccl-debug", metavar="PATH", default=None, help=record)
    a = p.parse_args(argv)
    if a.record_nccl_debug:
        return record_nccl_debug(a.record_nccl_debug, a.world_size)
    ops = tuple(o.strip() for o in a.ops.split(",") if o.strip())
    if unknown := [o for o in ops if o not in sweep.OPS]:
        p.error(f"unknown op(s) {unknown}; choose from {sweep.OPS}")
    backend, reason = hardware.choose_backend(a.world_size, a.backend)
    gpu = backend == "nccl"
    lo = a.min_bytes or sizes.KiB
    hi = a.max_bytes or (sizes.GiB if gpu else sizes.MiB)
    if hi < lo:
        p.error(f"--max-bytes {sizes.format_bytes(hi)} is below --min-bytes {sizes.format_bytes(lo)}")
    chosen = sizes.sizes_between(lo, hi, a.factor or (4 if gpu else 32))
    between = f"{sizes.format_bytes(chosen[0])} .. {sizes.format_bytes(chosen[-1])}"
    print(f"{a.world_size} ranks, backend {backend} ({reason}); {len(chosen)} sizes {between}; ops {', '.join(ops)}")
    run = dict(iters=a.iters, warmup=a.warmup, backend=backend, timeout=600, progress="sizes")
    rows = sweep.run_sweep(a.world_size, chosen, ops=ops, **run)
    print(nccltests.sweep_table(rows))
    if not (compared := [d for d in nccltests.compare_with_reference(rows) if d["ratio"] is not None]):
        print("(nccl-tests reference: recorded with NCCL on 2 x H200; compared only for NCCL on 2 ranks)")
        return 0
    bad = target_check(rows)
    if any(d["nbytes"] >= TARGET_FROM for d in compared):
        verdict = "met" if not bad else "MISSED:\n  " + "\n  ".join(bad)
        print(f"target: busbw within 5% of nccl-tests from 64 MiB up: {verdict}")
    return 1 if (a.check and bad) else 0

"""``python -m mgpu_helpers.bench peer``: peer access, the peer copy and what NCCL's P2P transport is worth, beside
the figures recorded on 2 x H200 (below 2 GPUs: those, and what it skipped)."""

from mgpu_helpers.bench import arguments
from mgpu_helpers.measure import peer
from mgpu_helpers.report.sizes import parse_size


def main(argv: list[str]) -> int:
    p = arguments("peer", __doc__)
    p.add_argument("--world-size", type=int, default=2, help="ranks of the all-reduce (one GPU each)")
    p.add_argument("--copy-bytes", type=parse_size, default=256 << 20, help="bytes of the peer copy (default 256M)")
    a = p.parse_args(argv)
    print(peer.format_report(peer.measure_all(a.world_size, a.copy_bytes)))
    return 0

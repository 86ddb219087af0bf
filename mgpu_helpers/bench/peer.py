"""``python -m mgpu_helpers.bench peer``: peer access, the peer copy and what NCCL's P2P transport is worth.

Prints :func:`mgpu_helpers.measure.peer.peer_matrix` (``cudaDeviceCanAccessPeer``), the copy GPU0 -> GPU1 and back
(CUDA events), and the all-reduce busbw at 64 MiB .. 1 GiB with NCCL's default transports and with
``NCCL_P2P_DISABLE=1``, beside the figures recorded on 2 x H200. Below 2 GPUs it prints what it skipped and the
recorded figures, and exits 0.

    python -m mgpu_helpers.bench peer [--world-size 2] [--copy-bytes 256M]
"""

import argparse


def main(argv: list[str]) -> int:
    from mgpu_helpers.measure import peer
    from mgpu_helpers.report.sizes import parse_size

    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="python -m mgpu_helpers.bench peer", description=__doc__, formatter_class=raw)
    p.add_argument("--world-size", type=int, default=2, help="ranks of the all-reduce (one GPU each)")
    p.add_argument("--copy-bytes", type=parse_size, default=256 << 20, help="bytes of the peer copy (default 256M)")
    a = p.parse_args(argv)
    measured = peer.measure_all(a.world_size, a.copy_bytes)
    print(peer.format_report(measured))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

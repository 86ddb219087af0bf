"""Dispatch ``python -m mgpu_helpers.bench NAME [options]`` to ``mgpu_helpers.bench.NAME.main``."""

import importlib
import sys

BENCHES = {
    "launch": "rank launch: cold and repeat, against torch.multiprocessing.spawn and a subprocess per rank",
    "kernels": "vector-add bandwidth: Numba and CuPy kernels against torch copy/add",
    "collectives": "all-reduce / reduce-scatter / all-gather over message sizes: algbw and busbw",
    "ring": "hand-written ring all-reduce (isend/irecv) against dist.all_reduce: time and busbw",
    "ncu": "Nsight Compute: registers, achieved occupancy, DRAM throughput of the vecAdd kernels per block size",
    "registers": "registers per thread of notebook 02's kernels (--record PATH writes the recorded file)",
    "notebooks": "every notebook under nbval, one process each: seconds and slowest cells, beside a two-cell notebook",
    "peer": "peer access matrix, GPU0<->GPU1 copy bandwidth, all-reduce busbw with and without NCCL P2P",
    "gpu_failures": "record 01's asynchronous CUDA error and 03's ranks crowding GPU 0 (the files the notebooks read)",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print("usage: python -m mgpu_helpers.bench NAME [options]\n")
        for name, what in BENCHES.items():
            print(f"  {name:12s} {what}")
        return 2
    return importlib.import_module(f"mgpu_helpers.bench.{argv[0]}").main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

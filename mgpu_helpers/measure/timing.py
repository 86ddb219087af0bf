"""Timing GPU work from Python: CUDA events around a call, in seconds, and the bandwidth it implies. Import after
``mh.setup()``: whoever imports numba first decides whether the CUDA simulator is on. The simulator has no CUDA
events: the wall clock stands in, measuring Python running every thread, not a GPU."""

import time

from mgpu_helpers.models import bandwidth

LIBRARIES = ("numba", "cupy", "torch")


def simulator() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def synchronize_device(device) -> None:
    """Wait for the work queued on a torch ``device``: kernels and NCCL calls return once queued."""
    import torch

    if getattr(device, "type", str(device).split(":")[0]) == "cuda":
        torch.cuda.synchronize(device)


def synchronize(library: str = "numba") -> None:
    _event_api(library)[1]()


def time_gpu(fn, repeats: int = 20, warmup: int = 2, library: str = "numba") -> list[float]:
    """Seconds of ``fn()`` per repeat, between CUDA events of ``library`` ("numba", "cupy" or "torch"). Each repeat
    first queues an untimed ``fn()``: the timed launch is queued while it runs, so the time measures the kernel, not
    the Python-side launch cost (tens of microseconds in Numba) an idle GPU would wait through."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, not repeats={repeats}, warmup={warmup}")
    sync = _event_api(library)[1]
    on_gpu = not (library == "numba" and simulator())
    for _ in range(warmup):
        fn()
    if on_gpu:
        sync()
    out = []
    for _ in range(repeats):
        if on_gpu:
            fn()  # keeps the GPU busy while the timed launch is queued
        out.append(elapsed_s(fn, library))
    return out


def elapsed_s(fn, library: str | None = "numba") -> float:
    """Seconds of one ``fn()`` between CUDA events on the current stream; the wall clock for ``library=None``."""
    if library is None or (library == "numba" and simulator()):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    make_event, _, seconds = _event_api(library)
    start, stop = make_event(), make_event()
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return seconds(start, stop)


def time_batch(run, iters: int, warmup: int, device) -> float:
    """Seconds per call of ``run`` over ``iters`` back-to-back calls timed as one batch, after a barrier: on a GPU
    between CUDA events, so the host never waits inside the batch."""
    import torch.distributed as dist

    for _ in range(warmup):
        run()
    synchronize_device(device)
    dist.barrier()
    synchronize_device(device)

    def batch():
        for _ in range(iters):
            run()

    return elapsed_s(batch, "torch" if device.type == "cuda" else None) / iters


def _event_api(library: str):
    """(make an event, synchronize the device, seconds between two recorded events)."""
    seconds = lambda s, e: s.elapsed_time(e) * 1e-3  # Numba's and torch's events give milliseconds
    if library == "numba":
        from numba import cuda

        return cuda.event, cuda.synchronize, seconds
    if library == "cupy":
        import cupy

        cupy_seconds = lambda s, e: cupy.cuda.get_elapsed_time(s, e) * 1e-3
        return cupy.cuda.Event, lambda: cupy.cuda.Device().synchronize(), cupy_seconds
    if library == "torch":
        import torch

        return lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize, seconds
    raise ValueError(f"library must be one of {', '.join(repr(x) for x in LIBRARIES)}, not {library!r}")


def bandwidth_gbps(nbytes: int, time_s: float) -> float:
    """GB/s (1e9 bytes per second) of ``nbytes`` moved in ``time_s`` seconds."""
    return bandwidth.algbw(nbytes, time_s) / 1e9

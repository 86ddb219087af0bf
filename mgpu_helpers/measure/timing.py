"""Timing GPU work from Python: CUDA events around a call, in seconds, and the bandwidth it implies.

Import after ``mh.setup()`` (numba is imported inside the functions, but whoever imports numba first decides
whether the CUDA simulator is on). In the simulator there are no CUDA events: :func:`time_gpu` falls back to
wall-clock time of the call, which measures Python running every thread, not a GPU.
"""

import time

LIBRARIES = ("numba", "cupy", "torch")


def simulator() -> bool:
    """True when Numba runs kernels in its CUDA simulator (CPU mode)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def synchronize_device(device) -> None:
    """Wait until the GPU has run everything queued on a torch ``device`` (nothing to wait for on the CPU).

    CUDA kernels and NCCL calls return as soon as they are queued: a timed span must wait for them first.
    """
    import torch

    if getattr(device, "type", str(device).split(":")[0]) == "cuda":
        torch.cuda.synchronize(device)


def synchronize(library: str = "numba") -> None:
    """Wait until the GPU has finished all queued work of ``library`` (a no-op in the simulator)."""
    _event_api(library)[1]()


def time_gpu(fn, repeats: int = 20, warmup: int = 2, library: str = "numba") -> list[float]:
    """Seconds of ``fn()``, one per repeat, measured with CUDA events of ``library``.

    ``library`` is "numba", "cupy" or "torch": whose events bracket the call (all three use the legacy default
    stream here). Each repeat first queues an untimed ``fn()`` and then records start, ``fn()``, stop: the
    timed launch is queued while the untimed one still runs, so the time measures the kernel, not the
    Python-side launch cost (tens of microseconds in Numba) that an idle GPU would otherwise wait through.
    In the Numba simulator (no GPU), wall-clock seconds of ``fn()`` are used instead.
    """
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
    """Seconds of one ``fn()``: between two CUDA events of ``library`` recorded on the current stream, or by
    the wall clock when ``library`` is None (CPU work) or Numba runs in its simulator."""
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
    """Seconds per call of ``run``: ``warmup`` calls, then ``iters`` back-to-back calls timed as one batch.

    GPU: between two CUDA events on the current stream (the collectives are queued, the host never waits
    inside the batch); CPU: ``perf_counter`` around the batch. Ranks line up with a barrier first.
    """
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
    """(make an event, synchronize the device, seconds between two recorded events) for ``library``."""
    if library == "numba":
        from numba import cuda

        return cuda.event, cuda.synchronize, lambda s, e: s.elapsed_time(e) * 1e-3
    if library == "cupy":
        import cupy

        return (
            cupy.cuda.Event,
            lambda: cupy.cuda.Device().synchronize(),
            lambda s, e: cupy.cuda.get_elapsed_time(s, e) * 1e-3,
        )
    if library == "torch":
        import torch

        return (
            lambda: torch.cuda.Event(enable_timing=True),
            torch.cuda.synchronize,
            lambda s, e: s.elapsed_time(e) * 1e-3,
        )
    raise ValueError(f"library must be one of {', '.join(repr(x) for x in LIBRARIES)}, not {library!r}")


def bandwidth_gbps(nbytes: int, time_s: float) -> float:
    """GB/s (1e9 bytes per second) of ``nbytes`` moved (read + written, or copied) in ``time_s`` seconds."""
    if time_s <= 0:
        raise ValueError(f"time must be positive, not {time_s} s")
    return nbytes / time_s / 1e9

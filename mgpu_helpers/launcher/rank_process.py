"""The life of one rank process, forked by the job's leader: its output goes to one pipe (whole lines, live), its phases
and result to another (cloudpickled records of :mod:`~mgpu_helpers.launcher.messages`)."""

import ctypes
import faulthandler
import os
import signal
import sys
import time
import traceback
from contextlib import suppress

import cloudpickle

from mgpu_helpers.launcher import flight, native_stacks, ranks, trace
from mgpu_helpers.launcher.messages import Failed, Returned, Running
from mgpu_helpers.launcher.wire import write_frame


def _to_cpu(value):
    """Tensors in a (nested) result moved to the CPU, so the notebook can unpickle them without a GPU."""
    import torch  # the rank server imported it before forking this rank

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if type(value) in (list, tuple):
        return type(value)(_to_cpu(v) for v in value)
    if type(value) is dict:
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


def _send(res_fd: int, message) -> None:
    # Pickled whole before anything is written: a value that cannot be pickled raises here, and the pipe
    # never holds half a frame.
    write_frame(res_fd, cloudpickle.dumps(message))


def _flush() -> None:
    """Flush Python's streams, then every C stream (a partial last line included): ``os._exit`` does neither."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None).fflush(None)


def main(job, rank: int, out_fd: int, res_fd: int) -> None:
    """Run rank ``rank`` of ``job`` and exit (never returns)."""
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    # Line-buffered streams on the pipe: output reaches the cell line by line, as it is printed.
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    # C's too. C libraries write through C's own ``stdout``: NCCL's log (``NCCL_DEBUG``), CUDA's device ``printf``.
    # On a pipe C buffers it in blocks of 4 KiB, so lines would arrive late and the last block would be lost at
    # ``os._exit`` (Python does this itself only with PYTHONUNBUFFERED). Linux's libc exports ``stdout``/``stderr``.
    with suppress(OSError, ValueError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
        for name in ("stdout", "stderr"):
            libc.setvbuf(ctypes.c_void_p.in_dll(libc, name), None, 1, 0)  # 1 = _IOLBF
    # The fallback stack dump, for a rank whose dump thread cannot run (flight.start_dumper writes the whole one).
    stack_file = open(flight.stack_path(job.job_dir, rank, partial=True), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    flight.start_dumper(job.job_dir, rank)  # first thread of the rank: the mask it sets is inherited
    native_stacks.note_pid(job.job_dir, rank, int(job.env.get(native_stacks.LAUNCHER_PID, 0)) or None)
    world_size = job.world_size
    os.environ.clear()
    os.environ.update({**job.env, "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0"})
    sys.path[:] = job.sys_path
    with suppress(OSError):
        os.chdir(job.cwd)
    code, where = 0, "starting"
    try:
        import torch.distributed as dist

        # torch reads TORCH_DISTRIBUTED_DEBUG when torch.distributed is imported, which the rank
        # server did before this job's environment existed: read it again now.
        dist.set_debug_level_from_env()
        t0 = time.perf_counter()
        where = "joining the process group"
        store = None
        if job.init:
            ranks.init_process_group(rank, world_size, job.backend, job.init_method, timeout_s=job.pg_timeout_s)
            # gloo's init can return on one rank while a peer is still connecting to it. No line-up here:
            # a rank that returns waits at "mgpu/finished" below, its sockets open, until every peer has
            # returned too (a line-up costs a poll of the file store, 10 ms).
            store = dist.distributed_c10d._get_default_store()
        t1 = time.perf_counter()
        where = "unpickling the function"
        fn, args = cloudpickle.loads(job.payload)
        _send(res_fd, Running())
        where = "running the function"
        t2 = time.perf_counter()
        value = fn(rank, world_size, *args)
        t3 = time.perf_counter()
        where = f"sending the result (a {type(value).__module__}.{type(value).__qualname__})"
        message = Returned(_to_cpu(value), t1 - t0, t3 - t2, trace.collect())
        # Output first, then the result: once every rank's result is in, the notebook ends the ranks (they
        # are only leaving the group), and what they printed must already be in their output pipes.
        _flush()
        _send(res_fd, message)
        where = "leaving the process group"
        if store is None and dist.is_initialized():  # init=False: fn joined the group itself and is still in
            store = dist.distributed_c10d._get_default_store()  # it; a peer may still be connecting to us
        if store is not None:
            # Wait for every rank to finish fn before closing connections a slower peer may still read from:
            # through the rendezvous store, not a collective.
            store.set(f"mgpu/finished/{rank}", b"1")
            store.wait([f"mgpu/finished/{r}" for r in range(world_size)])
        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException as exc:
        code = 1
        try:
            blob = cloudpickle.dumps(exc)
        except Exception:
            blob = None  # the exception itself cannot travel; its type name and text still do
        try:
            _send(res_fd, Failed(where, type(exc).__name__, str(exc), traceback.format_exc(), blob))
        except Exception:
            traceback.print_exc()
    finally:
        with suppress(Exception):
            _flush()
        # Skip interpreter teardown: atexit hooks of CUDA/NCCL can hang, and the work is done.
        os._exit(code)

"""``python -m mgpu_helpers.bench launch``: how long a launch of N ranks doing one all-reduce takes, side by side:
``run_ranks`` repeated (phase by phase), from a new kernel, cold (``MGPU_FORKSERVER=0``), against accelerate's
``notebook_launcher``, ``torch.multiprocessing.spawn`` and a subprocess per rank. Every variant joins a gloo group
over loopback, all-reduces one tensor and checks the sum.
"""

import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from unittest import mock

from mgpu_helpers.bench import arguments
from mgpu_helpers.launcher import launch
from mgpu_helpers.launcher.launch import free_loopback_port, loopback_env
from mgpu_helpers.report import progress, tables


def allreduce_rank(rank: int, world_size: int) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([rank])
    dist.all_reduce(t)
    return int(t.item())


def join_and_check(init_method: str, **rank_and_size) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method, **rank_and_size)
    r, n = dist.get_rank(), dist.get_world_size()
    assert allreduce_rank(r, n) == n * (n - 1) // 2
    dist.destroy_process_group()


def _spawn_entry(rank: int, world_size: int, store: str) -> None:
    join_and_check(f"file://{store}", rank=rank, world_size=world_size)


def time_mp_spawn(world_size: int) -> float:
    import torch.multiprocessing as mp

    # The FileStore's file must not exist yet: a name in a private new folder (tempfile.mktemp's could be taken).
    with (
        tempfile.TemporaryDirectory(prefix="mgpu-bench-", ignore_cleanup_errors=True) as folder,
        mock.patch.dict(os.environ, loopback_env()),
    ):
        t0 = time.perf_counter()
        mp.spawn(_spawn_entry, args=(world_size, os.path.join(folder, "store")), nprocs=world_size, join=True)
        return time.perf_counter() - t0


_CHILD = "from mgpu_helpers.bench.launch import join_and_check\njoin_and_check('env://')\n"


def time_subprocesses(world_size: int) -> float:
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    port, size = str(free_loopback_port()), str(world_size)
    base = dict(os.environ, **loopback_env(), MASTER_PORT=port, PYTHONPATH=pkg_root, WORLD_SIZE=size)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env=dict(base, RANK=str(r))) for r in range(world_size)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"subprocess ranks failed: {codes}")
    return time.perf_counter() - t0


PHASES = [
    ("request", "check fn, pickle it, job folder and pipes (notebook)"),
    ("hand-over", "send the job; the server forks its leader and answers"),
    ("rank start", "the leader forks the ranks; each sets up and unpickles fn"),
    ("join group", "init_process_group (gloo), through a file store in the job folder"),
    ("fn", "the all-reduce itself"),
    ("results back", "the last result reaches the notebook"),
    ("clean-up", "close the job's pipes (the leader then ends the ranks), remove the folder"),
]


def _timed_launch(world_size: int) -> dict:
    """One launch of a rank function as a cell defines it, sent by value (no rank imports its module) and timing
    its own all-reduce: the total and the phases (seconds)."""
    marks = {}

    def allreduce_in_cell(rank, world_size):
        import time

        import torch
        import torch.distributed as dist

        start = time.monotonic()
        t = torch.tensor([rank])
        dist.all_reduce(t)
        return int(t.item()), start, time.monotonic()

    def marking(real, before: str, after: str):  # ``real``, noting the time in ``marks`` before and after it
        def call(*args, **kwargs):
            marks[before] = time.monotonic()
            out = real(*args, **kwargs)
            marks[after] = time.monotonic()
            return out

        return call

    submit = marking(launch._server.submit, "submit", "started")
    supervise = marking(launch.supervise, "supervise", "results")
    with mock.patch.object(launch._server, "submit", submit), mock.patch.object(launch, "supervise", supervise):
        t0 = time.monotonic()
        res = launch.run_ranks(allreduce_in_cell, world_size, backend="gloo", quiet=True, stream=False)
        end = time.monotonic()
    assert [v[0] for v in res.values] == [world_size * (world_size - 1) // 2] * world_size
    starts, ends = [v[1] for v in res.values], [v[2] for v in res.values]
    init_begin = min(s - i for s, i in zip(starts, res.init_seconds))
    return {
        "total": end - t0,
        "request": marks["submit"] - t0,
        "hand-over": marks["started"] - marks["submit"],
        "rank start": init_begin - marks["started"],
        "join group": max(res.init_seconds),
        "fn": max(e - s for s, e in zip(starts, ends)),
        "results back": marks["results"] - max(ends),
        "clean-up": end - marks["results"],
    }


def time_notebook_launcher(world_size: int) -> float | None:
    try:
        from accelerate import notebook_launcher
    except ImportError:
        return None
    t0 = time.perf_counter()
    port = str(free_loopback_port())
    with contextlib.redirect_stdout(io.StringIO()):  # it prints "Launching training on 4 CPUs."
        # env:// works: notebook_launcher sets WORLD_SIZE to num_processes = world_size
        notebook_launcher(join_and_check, args=("env://",), num_processes=world_size, use_port=port)
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    ap = arguments("launch", __doc__)
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=10, help="timed repeat launches (median reported)")
    ap.add_argument("--baseline-repeats", type=int, default=3, help="runs of each slow baseline")
    opts = ap.parse_args(argv)
    n = opts.world_size
    launch.prewarm(wait=True)  # the fork server up (started if there was none)
    launch.shutdown_server()
    new_kernel = _timed_launch(n)["total"]  # a server forked for this kernel, then the launch
    launch.shutdown_server()
    with mock.patch.dict(os.environ, MGPU_FORKSERVER="0"):
        cold = _timed_launch(n)["total"]  # a server started here: its import torch, then the launch
    runs = [_timed_launch(n) for _ in progress.iterate(range(opts.repeats), "run_ranks repeats")]
    accel = [time_notebook_launcher(n) for _ in progress.iterate(range(opts.baseline_repeats), "notebook_launcher")]
    spawn = [time_mp_spawn(n) for _ in progress.iterate(range(opts.baseline_repeats), "mp.spawn")]
    sub = [time_subprocesses(n) for _ in progress.iterate(range(opts.baseline_repeats), "subprocesses")]
    launch.shutdown_server()
    repeat = statistics.median(r["total"] for r in runs)
    rows = [
        ("run_ranks, repeat (server up)", repeat, f"median of {len(runs)}"),
        ("run_ranks, new kernel (fork server up)", new_kernel, "1 run"),
        ("run_ranks, cold (own server: import torch)", cold, "1 run"),
    ]
    baselines = [("accelerate notebook_launcher", accel)] if accel[0] is not None else []
    baselines += [("torch.multiprocessing.spawn", spawn), ("subprocess per rank", sub)]
    rows += [(name, statistics.median(times), f"median of {len(times)}") for name, times in baselines]
    print(f"Launch of {n} gloo ranks + process group + one all-reduce, on {os.cpu_count()} CPU core(s)")
    columns = [("variant", "variant", "{}"), ("s", "seconds", "{:.3f}"), ("x", "vs repeat", "{:.1f}x")]
    table = [{"variant": name, "s": secs, "x": secs / repeat, "runs": runs_text} for name, secs, runs_text in rows]
    print(tables.format_table(table, [*columns, ("runs", "runs", "{}")], left={"runs"}))
    if accel[0] is None:
        print("accelerate notebook_launcher: not measured (accelerate is not installed here)")
    print(f"\nWhere a repeat launch's {repeat * 1000:.0f} ms go (median of {len(runs)} per phase):")
    ms = {key: statistics.median(r[key] for r in runs) * 1000 for key, _ in PHASES}
    table = [{"phase": k, "ms": ms[k], "share": 100 * ms[k] / (repeat * 1000), "what": what} for k, what in PHASES]
    columns = [("phase", "phase", "{}"), ("ms", "ms", "{:.1f}"), ("share", "%", "{:.0f}"), ("what", "what", "{}")]
    print(tables.format_table(table, columns, left={"what"}))
    target = 0.08
    verdict = "meets" if repeat <= target else "MISSES"
    print(f"repeat launch {repeat:.3f} s {verdict} the target of {target} s (on an otherwise idle machine)")
    if accel[0] is not None:
        ratio = repeat / statistics.median(accel)
        print(f"run_ranks / notebook_launcher = {ratio:.2f} ({'at or below' if ratio <= 0.5 else 'ABOVE'} 0.5)")
    return 0

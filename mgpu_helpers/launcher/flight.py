"""torch's flight recorder, read when a launch hangs: the last collective each rank completed, and the one it is stuck
in, from the ring buffer of collectives (``TORCH_FR_BUFFER_SIZE`` entries) that NCCL and gloo both record into (torch
2.13). A thread of each rank (:func:`start_dumper`) writes it, and the rank's Python stacks, each file whole."""

import faulthandler
import os
import pickle
import re
import shutil
import signal
import tempfile
import threading
from contextlib import suppress
from pathlib import Path

BUFFER_ENTRIES = 2000
DUMP_SIGNAL = signal.SIGUSR2


def dump_path(job_dir: str, rank: int) -> str:
    return os.path.join(job_dir, f"flight-{rank}.pkl")


def stack_path(job_dir: str, rank: int, partial: bool = False) -> str:
    """Where the dump thread writes rank ``rank``'s stacks whole, or (``partial``) faulthandler's fallback."""
    return os.path.join(job_dir, f"stack-{rank}{'.partial' if partial else ''}.txt")


def _write_whole(path: str, write) -> None:
    """``write(f)`` into ``path + ".part"``, then rename it: a reader sees all of it or none."""
    with open(path + ".part", "wb") as f:
        write(f)
    os.replace(path + ".part", path)


def start_dumper(job_dir: str, rank: int) -> None:
    """In a rank, before any other thread exists: dump the Python stacks and the flight recorder on each SIGUSR2.
    The signal is blocked in every thread and taken by ``sigwait`` in this one: Python's signal handlers run in
    the main thread only, the one stuck in the collective (which waits with the GIL released)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {DUMP_SIGNAL})

    def serve() -> None:
        while True:
            signal.sigwait({DUMP_SIGNAL})
            _write_whole(stack_path(job_dir, rank), lambda f: faulthandler.dump_traceback(f, all_threads=True))
            try:
                import torch._C._distributed_c10d as c10d

                data = c10d._dump_fr_trace(includeStackTraces=False)
            except Exception as exc:
                data = pickle.dumps({"error": f"{type(exc).__name__}: {exc}"})
            _write_whole(dump_path(job_dir, rank), lambda f: f.write(data))

    threading.Thread(target=serve, name="mgpu-flight-recorder", daemon=True).start()


KEEP_LAST = 5  # the dumps of this many hangs are kept; older ones go
COPY_SUFFIX = "-nccl-names"  # analyzer_input's copy of a hang's folder, beside it


def keep_dumps(paths: dict) -> str | None:
    """Copy the ranks' dumps (``{rank: path}``) to a new folder that outlives the launch's, and return it (None: no
    dump): in ``$MGPU_FLIGHT_DIR`` (default: ``mgpu-flight-<uid>`` in the temp folder), the last :data:`KEEP_LAST`
    kept, a file per rank named as torch names its own, so that torch's analyzer (``fr_trace``) reads it as it is."""
    found = {r: p for r, p in paths.items() if os.path.exists(p)}
    if not found:
        return None
    base = os.environ.get("MGPU_FLIGHT_DIR") or os.path.join(tempfile.gettempdir(), f"mgpu-flight-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    older = []  # (mtime, name) of each hang; its analyzer copy (analyzer_input) goes with it and does not count
    for name in os.listdir(base):
        if not name.endswith(COPY_SUFFIX):
            with suppress(OSError):  # removed meanwhile by another kernel's clean-up
                older.append((os.path.getmtime(os.path.join(base, name)), name))
    for _mtime, name in sorted(older)[: max(0, len(older) - KEEP_LAST + 1)]:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        shutil.rmtree(os.path.join(base, name + COPY_SUFFIX), ignore_errors=True)
    folder = tempfile.mkdtemp(prefix="hang-", dir=base)
    for rank, path in found.items():
        target = os.path.join(folder, f"fr_trace_rank_{rank}")
        dump = read_dump(path)
        if dump is None or "entries" not in dump:
            shutil.copyfile(path, target)
        else:
            _write_whole(target, lambda f: pickle.dump(_named_groups(dump), f))
    return folder


def _named_groups(dump: dict) -> dict:
    """The dump with its process groups named as its entries name them. gloo's recorder (torch 2.13) files the
    default group's configuration and status under "" while its entries say "0", and torch's analyzer then
    fails on a KeyError; NCCL's dumps are left as they are."""
    names = {e["process_group"][0]: e["process_group"][1] for e in dump["entries"] if e.get("process_group")}
    if len(names) != 1 or "" not in dump.get("pg_config", {}):
        return dump
    ((name, desc),) = names.items()
    dump = dict(dump, pg_config=dict(dump["pg_config"]), pg_status=dict(dump.get("pg_status", {})))
    dump["pg_config"][name] = dict(dump["pg_config"].pop(""), name=name, desc=desc)
    if "" in dump["pg_status"]:
        dump["pg_status"][name] = dump["pg_status"].pop("")
    return dump


def analyzer_input(folder: str, torch_version: str | None = None) -> str:
    """The folder to give torch's analyzer (``python -m torch.distributed.flight_recorder.fr_trace``) for the dumps
    :func:`keep_dumps` wrote to ``folder``: ``folder`` itself, except under torch 2.11 (``torch_version``, by default
    the installed one's, read without importing torch into the kernel) when the dumps are gloo's. 2.11's analyzer
    stops at the first ``gloo:`` name ("name formatting error?"); for it, a copy beside ``folder`` whose records say
    ``nccl:`` instead, and nothing else: the analyzer compares sequence numbers, the names after the colon and the
    sizes, so its verdict on the copy is the one a newer torch gives on ``folder`` (checked on 10's hangs)."""
    import importlib.metadata  # here, not at the top: ranks import this module, and only a hang's report needs it

    major_minor = re.match(r"(\d+)\.(\d+)", torch_version or importlib.metadata.version("torch"))
    if tuple(map(int, major_minor.groups())) >= (2, 12):
        return folder
    dumps = {name: read_dump(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
    names = [str(e.get("profiling_name", "")) for d in dumps.values() if d for e in d.get("entries", [])]
    if not any(n.startswith("gloo:") for n in names):
        return folder
    copy = folder.rstrip(os.sep) + COPY_SUFFIX
    try:
        os.makedirs(copy, exist_ok=True)
        for name, dump in dumps.items():
            if dump and "entries" in dump:
                entries = [dict(e, profiling_name=_as_nccl(e.get("profiling_name"))) for e in dump["entries"]]
                _write_whole(os.path.join(copy, name), lambda f, d=dict(dump, entries=entries): pickle.dump(d, f))
    except OSError:  # a timeout's report must not fail on its last line: the folder as it is, then
        return folder
    return copy


def _as_nccl(name):
    return "nccl:" + name.split(":", 1)[1] if isinstance(name, str) and name.startswith("gloo:") else name


def read_dump(path: str) -> dict | None:
    """None when there is none (the rank never answered)."""
    try:
        return pickle.loads(Path(path).read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _completed(entry: dict) -> bool:
    # NCCL marks an entry "completed"; gloo leaves it "scheduled" and only sets "retired" once it finished.
    return entry.get("state") == "completed" or bool(entry.get("retired"))


def _label(entry: dict) -> tuple[int, str]:
    name = str(entry.get("profiling_name", "?")).split(":", 1)[-1]
    if entry.get("is_p2p"):
        return int(entry.get("p2p_seq_id", 0)), f"p2p {name}"
    return int(entry.get("collective_seq_id", 0)), name


def summarise(dump: dict | None) -> dict | None:
    """``{"last_completed": (seq, name) | None, "stuck_in": (seq, name) | None}`` of the default group, or None
    without a dump. ``seq``: torch's sequence number of the collective (p2p calls count apart, as "p2p send")."""
    if not dump or "entries" not in dump:
        return None
    entries = [e for e in dump["entries"] if e.get("pg_id", 0) == 0] or list(dump["entries"])
    entries.sort(key=lambda e: e.get("record_id", 0))
    done = [e for e in entries if _completed(e)]
    pending = [e for e in entries if not _completed(e)]
    return {"last_completed": _label(done[-1]) if done else None, "stuck_in": _label(pending[0]) if pending else None}


def describe(summary: dict | None) -> str:
    """One line for the RankTimeout message."""
    if summary is None:
        return "flight recorder: no dump"
    last, stuck = (f"#{s[0]} {s[1]}" if s else None for s in (summary["last_completed"], summary["stuck_in"]))
    # gloo records collectives but not send/recv: a rank stuck in one shows no pending entry.
    stuck = stuck or "none recorded (a send/recv, which gloo does not record?)"
    return f"flight recorder: last completed {last or 'none'}, stuck in {stuck}"

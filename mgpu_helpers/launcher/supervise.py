"""Supervising one launch from the notebook side: turning what the ranks sent (lines, results, exit codes, stacks,
flight-recorder dumps) into a :class:`RankResults` or an error that says what happened."""

import re
import signal
import time
from contextlib import suppress
from dataclasses import dataclass

import cloudpickle

from mgpu_helpers.launcher import flight, native_stacks
from mgpu_helpers.launcher.errors import LaunchError, RankError, RankTimeout
from mgpu_helpers.launcher.job import Job
from mgpu_helpers.launcher.messages import Failed, Returned
from mgpu_helpers.launcher.results import RankResults

_FRAME = re.compile(r'File "([^"]*)", line (\d+) in (\w+)')
_ENTRY = "mgpu_helpers/launcher/rank_process.py"  # the rank's entry point: its main thread runs it
# Frames of no one's own code: torch, Python's import and start-up machinery, the rank's entry point.
_MACHINERY = ("torch/", "<frozen", "runpy", _ENTRY)
# Seconds that forking the ranks and joining the process group may take on top of ``timeout``.
JOIN_GRACE_S = 60.0
_HINTS = {  # by where the rank failed: what to do
    "sending the result": "\nThe return value could not be sent back: return plain Python values, NumPy arrays "
    "or tensors (they are moved to the CPU for you).",
    "unpickling the function": "\nThe rank could not rebuild fn: a module it needs may not be importable by the "
    "ranks. Define fn in the notebook, or make its module importable (same sys.path and folder).",
}


@dataclass(frozen=True)
class Waiting:
    """Where a rank's main thread stood when its stack was dumped: ``frames``, ``(path, line, function)`` from
    the innermost call out. The one reading of a rank's stack, for the launcher's timeout message and for the
    checkers' (:func:`mgpu_helpers.checks.core.ranks.where_ranks_wait`)."""

    frames: tuple

    def dist_call(self) -> str:
        """``dist.<name>``: the torch.distributed function the rank is blocked in, else ''. (Its private helpers
        and the ``wrapper`` of torch's call logger are not what the code called.)"""
        for path, _line, func in self.frames:
            if "torch/distributed/" in path and func[:1].islower() and func != "wrapper":
                return f"dist.{func}"
        return ""

    def code_frames(self, skip=()) -> list:
        """The frames of someone's own code (not :data:`_MACHINERY`, no path containing one of ``skip``),
        innermost first: the first is the line the rank is waiting on."""
        return [f for f in self.frames if not any(part in f[0] for part in _MACHINERY + tuple(skip))]


def read_stack(stack: str) -> Waiting | None:
    """The main thread of a rank's faulthandler dump (the thread that runs the rank's entry point), or None."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack):
        if _ENTRY in block:
            return Waiting(tuple((path, int(line), func) for path, line, func in _FRAME.findall(block)))
    return None


def _waiting_in(stack: str) -> str | None:
    """The torch.distributed call a rank is blocked in, read from its faulthandler dump, if any."""
    if (waiting := read_stack(stack)) is None:
        return None
    if call := waiting.dist_call():
        code = waiting.code_frames()
        return call + (f" (called from {code[0][2]}, line {code[0][1]})" if code else "")
    if any("torch/cuda/" in path and func == "synchronize" for path, _line, func in waiting.frames):
        # NCCL queues collectives on a CUDA stream: the host then blocks where it waits for the GPU.
        return "torch.cuda.synchronize (waiting for GPU work queued earlier, such as an NCCL collective)"
    return None


def _tail(lines: list[str], n: int = 15) -> str:
    return "\n".join("    " + ln for ln in lines[-n:]) or "    (no output)"


def _how_it_ended(code: int | str, exited: str = " without returning a result") -> str:
    """How a process ended, from its exit code (minus the signal that killed it; "unknown": not ours to read)."""
    if code == "unknown":
        return "ended"
    if code >= 0:
        return f"exited with code {code}{exited}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def _so_far(job: Job) -> dict:
    """What every RankError carries: each rank's output, and the values of the ranks that returned."""
    return {"outputs": {r: list(o) for r, o in enumerate(job.outputs)}, "results": partial_results(job)}


def partial_results(job: Job) -> RankResults:
    """What the ranks that returned brought back (None for the others)."""
    got = [res if isinstance(res := job.results.get(r), Returned) else None for r in range(job.world_size)]
    return RankResults(
        world_size=job.world_size,
        backend=job.backend,
        reason=job.reason,
        values=[g.value if g else None for g in got],
        seconds=[g.fn_s if g else None for g in got],
        init_seconds=[g.init_s if g else None for g in got],
        outputs=[list(o) for o in job.outputs],
        spans=[g.spans if g else [] for g in got],
        launch_seconds=time.monotonic() - job.t0,
    )


def _rank_error(job: Job, rank: int, failed: Failed) -> RankError:
    hint = next((h for where, h in _HINTS.items() if failed.where.startswith(where)), "")
    if (early := job.returned_ranks()) and failed.exc_type in ("RuntimeError", "DistBackendError"):
        hint += (
            f"\nNote: rank(s) {early} had already returned. A rank that skips a collective or a recv "
            "leaves its peers waiting or talking to a closed connection."
        )
    message = (
        f"rank {rank} raised {failed.exc_type} while {failed.where}: {failed.text}\n"
        f"--- traceback on rank {rank} ---\n{failed.traceback.rstrip()}\n"
        f"--- last output of rank {rank} ---\n{_tail(job.outputs[rank])}{hint}"
    )
    err = RankError(message, rank=rank, exc_type=failed.exc_type, remote_traceback=failed.traceback, **_so_far(job))
    err.original = None
    with suppress(Exception):  # no blob, or one that cannot be rebuilt: the text and traceback still tell the story
        err.original = cloudpickle.loads(failed.exception_blob)
    return err


def supervise(job: Job) -> RankResults:
    """Follow a launched job until every rank has answered; returns its :class:`RankResults`, else raises what
    ``run_ranks`` says (a rank's death wins over the errors it causes in its peers). The caller ends the ranks."""
    while True:
        job.pump(0.05)
        if job.first_error is not None:
            # Let the peers' own errors and last lines arrive for a moment, then end them all.
            job.pump_until(lambda: job.leader_gone, 0.5)
            if job.leader_gone and len(job.results) < job.world_size:
                _raise_launcher_died(job)  # the rank's error most likely came from the launcher's death
            if dead := job.died_without_result():
                # A rank that died is the root cause; its peers' errors ("connection closed") follow from it.
                _raise_died(job, dead[0])
            job.kill()
            job.drain(2.0)
            raise _rank_error(job, *job.first_error)
        if job.died_without_result():
            job.drain(0.5)  # its result or error may still be in the pipe
            if (dead := job.died_without_result()) and job.first_error is None:
                _raise_died(job, dead[0])
        if len(job.results) == job.world_size:
            break  # every rank answered, its output flushed first: the clean-up ends them at once (Job.kill)
        if job.leader_gone:
            _raise_launcher_died(job)
        # ``timeout_s`` counts from the last rank's start of ``fn``: forking and joining is not the learner's code and
        # can take seconds on a loaded machine, so a hang's limit can be a few seconds. Joining has JOIN_GRACE_S more.
        joined = len(job.running_since) == job.world_size
        if time.monotonic() > (max(job.running_since.values()) if joined else job.t0 + JOIN_GRACE_S) + job.timeout_s:
            _raise_timeout(job)
    res = partial_results(job)
    if not job.quiet:
        print(f"[run_ranks] {job.world_size} rank(s), backend {job.backend} ({job.reason}), {res.launch_seconds:.2f} s")
    return res


def _raise_launcher_died(job: Job):
    """The leader's status pipe closed before every rank answered: the leader, or the whole server, died."""
    job.drain(0.5)  # the ranks die with the leader (PDEATHSIG); take their last lines
    code = None
    # Linux sends the leader its SIGKILL while the dying server exits, so by the time the leader's pipe has closed
    # and been read, a dead server is (nearly always) reaped already: a short look is enough.
    with suppress(Exception):  # subprocess.TimeoutExpired: the server lives
        code = job.server_proc.wait(0.25)
    answered = sorted(job.results)
    note = f" Rank(s) {answered} had answered before." if answered else ""
    if code is not None:
        raise LaunchError(
            f"the rank server died during this launch (it {_how_it_ended(code, '')}; out of memory, or killed by "
            f"hand?), and the ranks went with it.{note} The next launch starts a new rank server."
        )
    raise LaunchError(
        f"the leader process of this launch (pid {job.pgid}, which forks and watches the ranks) died, and "
        f"the ranks went with it.{note} Run the cell again; the rank server is still up."
    )


def _raise_died(job: Job, r: int):
    job.kill()
    job.drain(2.0)
    early = job.returned_ranks()
    note = f"\nRank(s) {early} had already returned." if early else ""
    if failed := sorted(k for k, res in job.results.items() if isinstance(res, Failed)):
        note += (
            f"\nRank(s) {failed} then failed too ({job.results[failed[0]].exc_type}), most likely "
            f"because rank {r} was gone."
        )
    raise RankError(
        f"rank {r} {_how_it_ended(job.exits.get(r))} while the other ranks were running (they have been "
        f"ended).{note}\n--- last output of rank {r} ---\n{_tail(job.outputs[r])}",
        rank=r,
        **_so_far(job),
    )


def _raise_timeout(job: Job):
    world_size = job.world_size
    stuck = [r for r in range(world_size) if r not in job.results and r not in job.exits]
    stacks, collectives = job.take_dumps(stuck)
    native, no_native = native_stacks.take(job.job_dir, stuck)
    job.kill()
    job.drain(2.0)
    waiting = {r: w for r in stuck if (w := _waiting_in(stacks.get(r, "")))}
    done = [r for r in range(world_size) if r in job.results or r in job.exits]
    joined = len(job.running_since)
    lines = [
        f"{len(stuck)} of {world_size} rank(s) were still running {job.timeout_s:g} s after every rank had joined "
        "the process group, and have been ended."
        if joined == world_size
        else f"{world_size - joined} of {world_size} rank(s) had not joined the process group "
        f"{job.timeout_s + JOIN_GRACE_S:g} s after the launch; every rank has been ended."
    ]
    for r in stuck:
        phase = "in fn" if r in job.running_since else "joining the process group"
        lines.append(f"  rank {r}: {waiting.get(r, phase)}; {flight.describe(collectives[r])}")
    if done:
        lines.append(
            f"  rank(s) {done} had already finished: a rank that returns early leaves its peers "
            "waiting at their next collective or recv."
        )
    if len({w.split(" ")[0] for w in waiting.values()}) > 1:
        lines.append(
            "Ranks are blocked in different collectives: every rank must call the same collectives "
            "in the same order (mismatched collectives)."
        )
    elif waiting and all(w.startswith(("dist.send", "dist.recv")) for w in waiting.values()):
        lines.append(
            "Every rank is blocked in a blocking send/recv: a deadlock. Pair each send with a recv "
            "on the peer (reorder), or use isend/irecv / batch_isend_irecv."
        )
    lines += [
        "The flight recorder's numbers are torch's sequence numbers of the collectives of the "
        "default group: ranks stuck at different numbers or names disagree on the order.",
        "Run with debug=True for torch's own check (TORCH_DISTRIBUTED_DEBUG=DETAIL).",
    ]
    for r in stuck:
        lines.append(f"--- Python stack of rank {r} ---\n{stacks.get(r) or '(none taken)'}")
        if beneath := native_stacks.beneath_python(native.get(r, "")):
            lines.append(
                f"--- native frames under that Python stack, rank {r} (py-spy; all of it in .native_stacks) ---\n"
                + "\n".join("  " + f for f in beneath)
            )
        lines.append(f"--- last output of rank {r} ---\n{_tail(job.outputs[r], 5)}")
    if no_native:
        lines.append(f"No native (C++) stacks: {no_native}.")
    if job.flight_dumps:
        lines.append(
            f"The flight recorder's dumps, one file per rank: {job.flight_dumps} (torch's analyzer: "
            f"python -m torch.distributed.flight_recorder.fr_trace {flight.analyzer_input(job.flight_dumps)})"
        )
    raise RankTimeout(
        "\n".join(lines),
        stacks=stacks,
        waiting_in=waiting,
        collectives=collectives,
        flight_dumps=job.flight_dumps,
        native_stacks=native,
        rank=stuck[0] if stuck else None,
        **_so_far(job),
    )

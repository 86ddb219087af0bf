"""The messages of a launch: each is one frame (:mod:`~mgpu_helpers.launcher.wire`) holding one record below, so a
field is read by name and a message of the wrong kind is caught by its type. The notebook sends the server a JobRequest
(the job's pipes attached) and reads Ready and Started back; the job's leader sends RankExit on the job's status pipe;
a rank sends Running, Returned or Failed on its result pipe."""

from dataclasses import dataclass


@dataclass(frozen=True)
class JobRequest:  # one launch, as the server needs it: everything a rank must set up before it calls ``fn``
    job_id: int
    world_size: int
    backend: str
    init: bool
    init_method: str
    payload: bytes  # cloudpickle of (fn, args)
    env: dict  # environment shared by the ranks (each adds its RANK, LOCAL_RANK, GROUP_RANK)
    job_dir: str  # private folder: rendezvous store, stack and flight-recorder dumps
    sys_path: list
    cwd: str
    pg_timeout_s: float


@dataclass(frozen=True)
class Ready:  # the server has imported torch and takes jobs
    server_pid: int


@dataclass(frozen=True)
class Started:  # the server forked the leader of job ``job_id``; its pid is also the ranks' process group
    job_id: int
    leader_pid: int


@dataclass(frozen=True)
class RankExit:  # how rank ``rank`` ended: exit code, or minus the signal number that killed it
    rank: int
    code: int


@dataclass(frozen=True)
class Running:  # the rank joined the process group and is calling ``fn`` (its timeout starts)
    pass


@dataclass(frozen=True)
class Returned:  # ``fn`` returned ``value`` (tensors moved to the CPU) after ``fn_s`` seconds
    value: object
    init_s: float
    fn_s: float
    spans: list


@dataclass(frozen=True)
class Failed:  # something raised in the rank while ``where`` (e.g. "running the function", "sending the result")
    where: str
    exc_type: str
    text: str
    traceback: str
    exception_blob: bytes | None  # the exception itself, cloudpickled, when it could be

"""What machine is this: GPUs, the links between them, and the mode the course runs in. Read through NVML
(nvidia-ml-py), never nvidia-smi's text, and without initialising CUDA: the kernel must stay free to fork."""

import contextlib
import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_bytes: int


@dataclass(frozen=True)
class Machine:
    """The facts the course needs about this machine. ``links[i][j]``: how GPU i reaches GPU j, in ``nvidia-smi
    topo -m`` words ("X" for itself, "NV18" for 18 NVLinks, "PIX"/"PXB"/"PHB"/"NODE"/"SYS" for PCIe paths)."""

    gpus: tuple[GpuInfo, ...] = ()
    links: tuple[tuple[str, ...], ...] = ()
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    note: str = ""

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def mode(self) -> str:
        """ "gpu" when at least one NVIDIA GPU is usable, else "cpu"."""
        return "gpu" if self.gpus else "cpu"


def _visible_indices(count: int) -> list[int]:
    """Apply CUDA_VISIBLE_DEVICES (NVML ignores it) to the physical indices 0..count-1."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count))
    chosen = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if not part.lstrip("-").isdigit():  # UUIDs or MIG names: not mapped without more NVML calls; kept in order
            chosen.append(len(chosen))
        elif 0 <= int(part) < count:
            chosen.append(int(part))
        else:
            break  # CUDA stops at the first invalid entry
    return chosen


_TOPO_LEVEL_NAMES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _text(value) -> str:
    """NVML's strings: bytes from older nvidia-ml-py, str from newer."""
    return value.decode() if isinstance(value, bytes) else value


def _links(pynvml, handles) -> tuple[tuple[str, ...], ...]:
    """The words of each pair: NV<count> where active NVLinks join the two GPUs, else their PCIe path."""
    bus_ids = [_text(pynvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
    n = len(handles)
    nvl = [[0] * n for _ in range(n)]
    for i, h in enumerate(handles):
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
            except pynvml.NVMLError:
                continue
            for j, bus in enumerate(bus_ids):
                if j != i and bus.lower().endswith(remote.lower()[-12:]):
                    nvl[i][j] += 1

    def link(i: int, j: int) -> str:
        if i == j:
            return "X"
        if nvl[i][j]:
            return f"NV{nvl[i][j]}"
        try:
            return _TOPO_LEVEL_NAMES.get(int(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])), "SYS")
        except pynvml.NVMLError:
            return "?"

    return tuple(tuple(link(i, j) for j in range(n)) for i in range(n))


def detect() -> Machine:
    """NVML's GPUs as CUDA_VISIBLE_DEVICES shows them; never raises (CPU mode, the reason in ``note``)."""
    if os.environ.get("MGPU_FORCE_CPU") == "1":
        return Machine(note="MGPU_FORCE_CPU=1: GPUs ignored")
    try:
        import pynvml  # provided by the nvidia-ml-py package
    except ImportError:
        return Machine(note="nvidia-ml-py is not installed: cannot look for GPUs")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Machine(note=f"no NVIDIA driver ({type(exc).__name__})")
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in _visible_indices(pynvml.nvmlDeviceGetCount())]
        memory = [int(pynvml.nvmlDeviceGetMemoryInfo(h).total) for h in handles]
        gpus = [GpuInfo(k, _text(pynvml.nvmlDeviceGetName(h)), memory[k]) for k, h in enumerate(handles)]
        links = _links(pynvml, handles) if len(handles) > 1 else (("X",),) * len(handles)
        return Machine(gpus=tuple(gpus), links=links)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


_cached: Machine | None = None


def machine(refresh: bool = False) -> Machine:
    """The detected machine, read once per process (NVML calls take tens of milliseconds)."""
    global _cached
    if _cached is None or refresh:
        _cached = detect()
    return _cached


def choose_backend(world_size: int, backend: str = "auto", gpu_count: int | None = None) -> tuple[str, str]:
    """``(backend, reason)`` for ``world_size`` ranks: "auto" is NCCL with one GPU per rank when there are enough
    GPUs, else gloo on the CPU; "nccl" with more ranks than GPUs raises ValueError saying what to do."""
    gpus = machine().gpu_count if gpu_count is None else gpu_count
    if backend not in ("auto", "nccl", "gloo"):
        raise ValueError(f"backend must be 'auto', 'nccl' or 'gloo', not {backend!r}")
    if backend == "gloo":
        return "gloo", "gloo asked for: ranks run on the CPU"
    if backend == "nccl":
        if world_size > gpus:
            use = f"world_size <= {gpus}, or " if gpus else ""
            raise ValueError(
                f"backend='nccl' needs one GPU per rank: {world_size} ranks asked for, {gpus} GPU(s) here. "
                f"Use {use}backend='gloo' (ranks on the CPU)."
            )
        return "nccl", f"nccl asked for: one GPU per rank ({world_size} of {gpus})"
    if gpus == 0:
        return "gloo", "no GPU found: gloo ranks on the CPU"
    if world_size > gpus:
        return "gloo", f"{world_size} ranks > {gpus} GPU(s): gloo ranks on the CPU"
    return "nccl", f"nccl, one GPU per rank ({world_size} of {gpus})"

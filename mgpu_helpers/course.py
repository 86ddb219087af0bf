"""``setup()``: the first cell of every notebook."""

import contextlib
import os
import shutil
import stat
import sys
import warnings
from dataclasses import dataclass

from mgpu_helpers import hardware


@dataclass(frozen=True)
class CourseEnv:
    """What :func:`setup` found and chose (``backend``: ``run_ranks``' default for one rank per GPU)."""

    mode: str
    gpus: tuple
    backend: str
    numba_simulator: bool
    cupy: bool
    machine: hardware.Machine
    projection: bool = False

    def summary(self) -> str:
        lines = [f"mode:     {self.mode}"]
        if self.gpus:
            lines += [f"GPU {g.index}:    {g.name}, {g.memory_bytes / 2**30:.0f} GiB" for g in self.gpus]
            if len(self.gpus) > 1:
                n, links = len(self.gpus), self.machine.links
                pairs = [f"GPU{i}-GPU{j} {links[i][j]}" for i in range(n) for j in range(i + 1, n)]
                lines.append("links:    " + ", ".join(pairs))
        else:
            lines.append(f"GPUs:     none ({self.machine.note or 'not found'})")
        lines.append(f"backend:  {self.backend} (torch.distributed, default for run_ranks)")
        numba = "Numba CUDA simulator (slow, small sizes)" if self.numba_simulator else "Numba on the GPU"
        lines.append(f"kernels:  {numba}")
        lines.append("CuPy:     " + ("on the GPU" if self.cupy else "needs a GPU: CuPy cells explain and skip"))
        lines.append(f"CPUs:     {self.machine.cpu_count}")
        if self.projection:
            lines.append("display:  projection mode (large fonts, thick lines, bigger widgets)")
        return "\n".join(lines)

    def __repr__(self) -> str:  # shown when a cell ends with `env`
        return f"CourseEnv(mode={self.mode!r}, gpus={len(self.gpus)}, backend={self.backend!r})"


def private_cache_dir(name: str = "cupy") -> str:
    """``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/mgpu-course/<name>``, created private (0700) and checked to be
    this user's own: not a fixed name in /tmp, which another user of a classroom server could create first and
    plant compiled kernels in. A folder of ours that others could write to is emptied (its content cannot be
    trusted) and made private; PermissionError, saying what to do, when one on the way is not ours or a link."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.makedirs(base, mode=0o700, exist_ok=True)
    path = base
    for part in ("mgpu-course", name):
        path = os.path.join(path, part)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            what = "not a folder (a link?)" if not stat.S_ISDIR(info.st_mode) else f"owned by uid {info.st_uid}"
            raise PermissionError(
                f"{path} is {what}, not a folder of yours: remove it, or set CUPY_CACHE_DIR to a folder of "
                "your own before setup()."
            )
        if info.st_mode & 0o022:
            for entry in os.listdir(path):
                full = os.path.join(path, entry)
                shutil.rmtree(full) if os.path.isdir(full) and not os.path.islink(full) else os.unlink(full)
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.chmod(path, 0o700)
    return path


def setup(show: bool = True, prewarm: bool = True, projection: bool = False) -> CourseEnv:
    """Detect the machine and get the notebook ready: in CPU mode Numba's CUDA simulator is switched on; CuPy's kernel
    cache goes to a :func:`private_cache_dir`; ``prewarm`` starts the rank server: the first ``run_ranks`` is fast."""
    m = hardware.machine(refresh=True)
    gpu_mode = m.mode == "gpu"
    sim = not gpu_mode  # Numba reads its CUDA simulator switch once, when numba is first imported
    if "numba" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if sim else "0"
    elif sim != (os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"):
        warnings.warn(
            "numba was imported before mgpu_helpers.setup(), so the CUDA simulator can no longer be "
            f"switched {'on' if sim else 'off'}. Restart the kernel and run setup() first.",
            stacklevel=2,
        )
        sim = not sim
    if "CUPY_CACHE_DIR" not in os.environ:  # unless the user chose one
        try:
            os.environ["CUPY_CACHE_DIR"] = private_cache_dir("cupy")
        except OSError as exc:
            warnings.warn(f"CuPy's kernel cache stays where CuPy puts it: {exc}", stacklevel=2)
    backend, _ = hardware.choose_backend(max(1, m.gpu_count), "auto", m.gpu_count)
    from mgpu_helpers.widgets import projection as _projection

    projection = bool(projection) or _projection.requested_by_environment()
    if projection:
        _projection.projection_mode(on=True)
    env = CourseEnv(m.mode, m.gpus, backend, numba_simulator=sim, cupy=gpu_mode, machine=m, projection=projection)
    if prewarm:
        from mgpu_helpers.launcher.launch import prewarm as _prewarm

        _prewarm()
    if show:
        print(env.summary())
    return env

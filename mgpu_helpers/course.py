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
    """What :func:`setup` found and chose.

    ``mode`` is "gpu" or "cpu"; ``gpus`` the visible GPUs; ``backend`` what ``run_ranks`` uses by default
    for as many ranks as there are GPUs (gloo when there are none); ``numba_simulator`` whether Numba kernels
    run in the CUDA simulator; ``cupy`` whether CuPy kernels can run here.
    """

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
            lines += [f"GPU {g.index}:    {g.name}, {g.memory_gib:.0f} GiB" for g in self.gpus]
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


def _switch_numba_simulator(on: bool) -> bool:
    """Turn Numba's CUDA simulator on or off; it is read once, when numba is first imported."""
    if "numba" in sys.modules:
        current = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
        if current != on:
            warnings.warn(
                "numba was imported before mgpu_helpers.setup(), so the CUDA simulator can no longer be "
                f"switched {'on' if on else 'off'}. Restart the kernel and run setup() first.",
                stacklevel=3,
            )
        return current
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if on else "0"
    return on


def private_cache_dir(name: str = "cupy") -> str:
    """``<user cache>/mgpu-course/<name>``, created private (0700) and checked to be this user's own.

    The user's cache directory is ``$XDG_CACHE_HOME`` or ``~/.cache``. Not a fixed name in /tmp: on a shared
    classroom server another user could create that first and plant compiled kernels in it. A folder of
    ours that others could write to is emptied (its content cannot be trusted) and made private. Raises
    PermissionError, saying what to do, when a folder on the way is not ours or is a link.
    """
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


def _use_private_cupy_cache() -> None:
    """Point CuPy's kernel cache at :func:`private_cache_dir`, unless the user chose one already."""
    if "CUPY_CACHE_DIR" in os.environ:
        return
    try:
        os.environ["CUPY_CACHE_DIR"] = private_cache_dir("cupy")
    except OSError as exc:
        warnings.warn(f"CuPy's kernel cache stays where CuPy puts it: {exc}", stacklevel=3)


def setup(show: bool = True, prewarm: bool = True, projection: bool = False) -> CourseEnv:
    """Detect the machine, choose CPU or GPU mode, and get the notebook ready.

    - GPUs: count, names, memory and links, read through NVML (no CUDA initialisation);
    - CPU mode: switches on Numba's CUDA simulator (before numba is imported) so kernels still run;
    - keeps CuPy's kernel cache in a private folder of the user's cache directory (:func:`private_cache_dir`);
    - starts the rank server in the background so the first ``run_ranks`` is quick (``prewarm``);
    - ``projection=True`` (or the environment variable ``MGPU_PROJECTION=1``) switches on projection mode:
      large fonts, thick lines, high-contrast colours and bigger widget controls, for a classroom projector
      (see :mod:`mgpu_helpers.widgets.projection`);
    - prints a short summary when ``show`` is true.

    Returns a :class:`CourseEnv`.
    """
    m = hardware.machine(refresh=True)
    gpu_mode = m.mode == "gpu"
    sim = _switch_numba_simulator(not gpu_mode)
    _use_private_cupy_cache()
    backend, _ = hardware.choose_backend(max(1, m.gpu_count), "auto", m.gpu_count)
    from mgpu_helpers.widgets import projection as _projection

    projection = bool(projection) or _projection.requested_by_environment()
    if projection:
        _projection.projection_mode(on=True)
    env = CourseEnv(
        mode=m.mode, gpus=m.gpus, backend=backend, numba_simulator=sim, cupy=gpu_mode, machine=m, projection=projection
    )
    if prewarm:
        from mgpu_helpers.launcher.launch import prewarm as _prewarm

        _prewarm()
    if show:
        print(env.summary())
    return env

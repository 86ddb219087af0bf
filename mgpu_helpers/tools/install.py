"""``python mgpu_helpers/tools/install.py``: install the course into the running Python (what ``make install`` runs).

Which build of torch, and which CuPy, depend on the machine; everything else comes from ``pyproject.toml``:

- **Linux without an NVIDIA GPU**: ``torch==2.13.0+cpu``, first by pip's default lookup (a local wheel folder in
  ``PIP_FIND_LINKS``), and only then from PyTorch's CPU index, so a machine with the wheel never waits on an
  index it cannot reach. The ``+cpu`` pin makes pip fail, naming the wheel, rather than fall back to PyPI's
  Linux build, a CUDA build of several GB. CuPy ``cupy-cuda12x`` (it imports without a GPU).
- **Linux with an NVIDIA GPU**: PyPI's torch (CUDA), and the CuPy wheel for that torch's CUDA major.
- **macOS**: PyPI's torch (there is no ``+cpu`` build); no CuPy (it needs CUDA).
- A torch that is already installed and new enough is kept (a GPU image's own CUDA build, a re-run).

``--torch SPEC``: a ``+cpu`` requirement names the CPU build (``make``'s ``TORCH``, default ``torch==2.13.0+cpu``);
any other requirement overrides the choice on every machine (``make lab TORCH=torch``: PyPI's default build);
``--dry-run`` prints the pip commands instead of running them.
"""

# (the annotations stay unevaluated, so an older Python reaches the version check below and says so)
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys

CPU_TORCH = "torch==2.13.0+cpu"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MIN_TORCH = (2, 11)
MIN_PYTHON = (3, 11)
CUPY_EXTRA_BY_CUDA_MAJOR = {12: "cuda12", 13: "cuda13"}


def nvidia_gpu_present() -> bool:
    """Whether the NVIDIA driver lists a GPU: nvidia-ml-py (the course's own check) is not installed yet."""
    if smi := shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and re.search(r"^GPU \d+", out.stdout, re.M):
                return True
    gpus = "/proc/driver/nvidia/gpus"
    return os.path.isdir(gpus) and bool(os.listdir(gpus))


def installed_torch() -> tuple[str, str | None] | None:
    """(version, CUDA version or None) of the torch importable here, or None; read in a child process."""
    code = "import torch; print(torch.__version__, torch.version.cuda or '')"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version, _, cuda = out.stdout.strip().partition(" ")
    return (version, cuda or None) if out.returncode == 0 else None


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0)."""
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def torch_attempts(
    system: str, gpu: bool, torch_spec: str | None = None, cpu_index: str = CPU_INDEX, extra_flags: tuple = ()
) -> list[list[str]]:
    """The pip ``install`` argument lists to try, in order, until one succeeds."""
    flags = list(extra_flags)
    if torch_spec and "+cpu" not in torch_spec:
        return [flags + [torch_spec]]
    if system == "Linux" and not gpu:
        spec = torch_spec or CPU_TORCH
        return [flags + [spec], flags + ["--extra-index-url", cpu_index, spec]]
    return [flags + [f"torch>={'.'.join(map(str, MIN_TORCH))}"]]


def cupy_extra(system: str, gpu: bool, torch_cuda: str | None) -> str | None:
    """The extra of ``pyproject.toml`` that brings the right CuPy, or None."""
    if system != "Linux":
        return None
    return CUPY_EXTRA_BY_CUDA_MAJOR.get(version_tuple(torch_cuda)[0]) if gpu and torch_cuda else "cuda12"


def _pip(args: list[str], dry_run: bool) -> int:
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q"] + args
    print("+", " ".join(cmd), flush=True)
    return 0 if dry_run else subprocess.call(cmd)


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="python mgpu_helpers/tools/install.py", description=__doc__, formatter_class=raw)
    default = f"default: by machine; {CPU_TORCH} on a Linux machine without an NVIDIA GPU"
    p.add_argument("--torch", default=None, help=f"torch requirement ({default})")
    p.add_argument("--cpu-index", default=CPU_INDEX, help="PyTorch's CPU index, asked only when needed")
    p.add_argument("--torch-flags", default="", help="extra pip flags for the torch step")
    p.add_argument("--dry-run", action="store_true", help="print the pip commands, run nothing")
    a = p.parse_args(argv)
    if sys.version_info[:2] < MIN_PYTHON:
        need, this = ".".join(map(str, MIN_PYTHON)), f"{platform.python_version()} ({sys.executable})"
        why = f"the course needs Python {need} or newer; this is {this}. Try: make lab PYTHON=python3.11"
        print(why, file=sys.stderr)
        return 2
    system, gpu = platform.system(), nvidia_gpu_present()
    found = "an NVIDIA GPU" if gpu else "no NVIDIA GPU"
    print(f"install: {system} {platform.machine()}, Python {platform.python_version()}, {found}", flush=True)
    have = installed_torch()
    override = a.torch is not None and "+cpu" not in a.torch and a.torch != "torch"
    if have and version_tuple(have[0]) >= MIN_TORCH and not override:
        print(f"install: keeping torch {have[0]} (already installed)")
    else:
        attempts = torch_attempts(system, gpu, a.torch, a.cpu_index, tuple(a.torch_flags.split()))
        for i, args in enumerate(attempts):
            if _pip(args, a.dry_run) == 0:
                break
            if i + 1 < len(attempts):
                next_try = "install: no CPU build of torch found by the default lookup; asking PyTorch's CPU index"
                print(next_try, flush=True)
        else:
            tried = " / ".join(" ".join(x) for x in attempts)
            how = "Put the wheel in a folder named by PIP_FIND_LINKS, or reach the network, or give your own build"
            print(f"install: could not install torch ({tried}). {how}: make lab TORCH=torch", file=sys.stderr)
            return 1
        have = None if a.dry_run else installed_torch()
    extras = ["test"] + [e for e in [cupy_extra(system, gpu, have[1] if have else None)] if e]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if _pip(["-e", f"{root}[{','.join(extras)}]"], a.dry_run) != 0:
        print("install: pip could not install the course's packages (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

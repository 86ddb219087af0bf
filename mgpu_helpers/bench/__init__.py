"""``python -m mgpu_helpers.bench NAME`` (README.md here): each prints its figures beside a baseline of the same run."""

import argparse
import sys

from mgpu_helpers import hardware
from mgpu_helpers.lazy import attach

__getattr__, __dir__, __all__ = attach(__name__)


def arguments(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m mgpu_helpers.bench NAME``, its help the bench's docstring."""
    raw = argparse.RawDescriptionHelpFormatter
    return argparse.ArgumentParser(prog=f"python -m mgpu_helpers.bench {name}", description=doc, formatter_class=raw)


def gpu_machine(name: str):
    """``hardware.machine()`` where it has a GPU, else None after saying on stderr that bench NAME needs one."""
    m = hardware.machine()
    if m.gpus:
        return m
    print(f"bench {name} needs an NVIDIA GPU: this machine has none ({m.note or 'none found'}).", file=sys.stderr)
    return None

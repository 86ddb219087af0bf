"""Message sizes: one grammar for every command and notebook, a whole number with an optional binary unit
(``B``, ``K``/``KB``/``KiB``, ``M`` ..., ``G`` ..., any case; powers of 1024, as nccl-tests reads ``-b 1K -e 1G``)."""

import argparse
import re

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
# Upper-case unit -> bytes: "", "B", then K, KB, KIB and the same for M and G.
UNITS = {"": 1, "B": 1} | {p + s: size for p, size in (("K", KiB), ("M", MiB), ("G", GiB)) for s in ("", "B", "IB")}
FLOAT32_BYTES = 4


class SizeError(argparse.ArgumentTypeError, ValueError):
    """A size that cannot be read; a ``ValueError``, and argparse prints its message as it is."""


def parse_size(text) -> int:
    """'1K' -> 1024, '64M', '4096' (binary units); :class:`SizeError` saying how to write one otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in UNITS or int(m.group(1)) == 0:
        raise SizeError(
            f"not a size: {text!r} (write a whole number of bytes with an optional binary unit, e.g. 4096, 1K, 64M, 1G)"
        )
    return int(m.group(1)) * UNITS[m.group(2).upper()]


def format_bytes(nbytes: float) -> str:
    """1024 -> '1 KiB', 67108864 -> '64 MiB', 1536 -> '1.5 KiB', 100 -> '100 B' (whole units when exact)."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= size:
            v = nbytes / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(nbytes)} B"


def sizes_between(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """Message sizes from ``min_bytes`` to ``max_bytes`` (inclusive), each ``factor`` times the previous."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"need 0 < min_bytes <= max_bytes and factor >= 2, got {min_bytes}, {max_bytes}, {factor}")
    out = [int(min_bytes)]
    while out[-1] * factor <= max_bytes:
        out.append(out[-1] * factor)
    return out


def float32_elements(nbytes: int, world_size: int) -> int:
    """float32 elements for a buffer of about ``nbytes``, rounded down to a multiple of ``world_size``
    (at least one element per rank), so that reduce-scatter and all-gather split it evenly."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return max(1, int(nbytes) // (FLOAT32_BYTES * world_size)) * world_size

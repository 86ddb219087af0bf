"""The ``nvidia-smi topo -m`` matrix and ``nvidia-smi nvlink -s``: parse them and explain their words (pure).
``NV18`` is a count of bonded NVLinks, not one cable (through NVSwitch chips on 8-GPU HGX boards). ``nvlink -s``
gives each link's speed one way (18 x 26.562 = 478 GB/s on the H200 host); a datasheet's 900 GB/s counts both."""

import itertools
import re
from typing import NamedTuple

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU|NIC)\d+$")

# What each word of the matrix means (nvidia-smi's legend), fastest path first.
LINK_MEANINGS = {
    "X": "self",
    "NV#": "a bonded set of # NVLinks (fastest; through NVSwitch chips on 8-GPU HGX boards, direct on 4-GPU boards and bridges)",
    "PIX": "PCIe, at most one PCIe bridge",
    "PXB": "PCIe, several PCIe bridges, no host bridge",
    "PHB": "PCIe through a PCIe host bridge (usually the CPU)",
    "NODE": "PCIe and the interconnect between host bridges of one NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI), slowest",
}
# The kinds of path the words name, fastest first (a figure colours the matrix by these).
LINK_CLASSES = {"NVLink": ("NV#",), "PCIe switch (PIX/PXB)": ("PIX", "PXB"), "host bridge (PHB/NODE)": ("PHB", "NODE")}
LINK_CLASSES |= {"across CPU sockets (SYS)": ("SYS",), "self (X)": ("X",)}
NV_NOTE = "NV# counts the NVLinks bonded between a pair; the link speeds of `nvidia-smi nvlink -s` are per direction"


class TopoMatrix(NamedTuple):
    """``links[i][j]``: words like "NV18", "SYS"; ``columns``: per GPU, the other columns (CPU Affinity ...);
    ``source``: where it came from (a comment line of the file, "NVML", or "")."""

    names: tuple
    links: tuple
    columns: dict
    source: str


def parse_topo_matrix(text: str) -> TopoMatrix:
    """The GPUs of ``nvidia-smi topo -m``'s text (ANSI codes and ``#`` comment lines allowed; NIC rows and
    columns left out of ``links``); ValueError when no GPU header is found or the matrix is not square."""
    lines = [_ANSI.sub("", ln).rstrip("\n") for ln in text.splitlines()]
    source = next((ln.lstrip("# ").strip() for ln in lines if ln.startswith("#")), "")
    body = [ln for ln in lines if not ln.startswith("#")]
    # The column line: its first cell (after an empty one) is GPU0 and, unlike the GPU0 row, not followed by X.
    split = [[c.strip() for c in ln.split("\t")] for ln in body]
    firsts = [cells[1:] if cells and cells[0] == "" else cells for cells in split]
    header_i = next((i for i, c in enumerate(firsts) if len(c) >= 2 and c[0] == "GPU0" and c[1] != "X"), None)
    if header_i is None:
        raise ValueError("no `nvidia-smi topo -m` header (a line of column names starting with GPU0) found")
    header = [h for h in split[header_i] if h]
    devices = [h for h in header if _DEVICE.match(h)]
    extra = header[len(devices) :]
    gpus = [d for d in devices if d.startswith("GPU")]
    rows = {}
    for ln, cells in zip(body[header_i + 1 :], split[header_i + 1 :]):
        if not ln.strip() or ln.startswith("Legend"):
            break
        if _DEVICE.match(cells[0]):
            rows[cells[0]] = cells[1:]
    links, columns = [], {}
    for g in gpus:
        if g not in rows:
            raise ValueError(f"the matrix has a {g} column but no {g} row")
        links.append(tuple(rows[g][devices.index(o)] for o in gpus))
        columns[g] = dict(zip(extra, [c for c in rows[g][len(devices) :] if c]))
    return TopoMatrix(tuple(gpus), tuple(links), columns, source)


def parse_nvlink_speeds(text: str) -> dict:
    """``{"GPU0": [GB/s of each link, ...], ...}`` from ``nvidia-smi nvlink -s`` (per direction)."""
    speeds, gpu = {}, None
    for line in text.splitlines():
        head = re.match(r"^GPU (\d+):", line)
        link = re.match(r"^\s+Link \d+: ([0-9.]+) GB/s", line)
        if head:
            gpu = f"GPU{head.group(1)}"
            speeds[gpu] = []
        elif link and gpu is not None:
            speeds[gpu].append(float(link.group(1)))
    if not speeds:
        raise ValueError("the text holds no `GPU k:` / `Link j: x GB/s` lines of `nvidia-smi nvlink -s`")
    return speeds


def from_links(links, source: str = "NVML") -> TopoMatrix:
    """Wrap ``env.machine.links`` (NVML, nvidia-smi words) as a :class:`TopoMatrix`."""
    names = tuple(f"GPU{i}" for i in range(len(links)))
    return TopoMatrix(names, tuple(tuple(r) for r in links), {n: {} for n in names}, source)


def _legend_word(word: str) -> str:
    """The legend's key of a matrix word: "NV18" -> "NV#", "pxb" -> "PXB"."""
    w = word.strip().upper()
    return "NV#" if re.fullmatch(r"NV\d+", w) else w


def link_meaning(word: str) -> str:
    """Plain-English meaning of one matrix word ("NV18" -> "a bonded set of 18 NVLinks ...")."""
    key = _legend_word(word)
    if key == "NV#":
        return LINK_MEANINGS["NV#"].replace("#", word.strip()[2:])
    return LINK_MEANINGS.get(key, f"unknown link type {word!r}")


def link_class(word: str) -> str:
    """The kind of path of one matrix word: "NV18" -> "NVLink", "PXB" -> "PCIe switch (PIX/PXB)" ..."""
    key = _legend_word(word)
    for name, words in LINK_CLASSES.items():
        if key in words:
            return name
    raise ValueError(f"not an nvidia-smi topo -m link word: {word!r}")


def pairs(topo: TopoMatrix) -> list[tuple[str, str, str]]:
    """Each pair of distinct GPUs once: (gpu_a, gpu_b, link word), fastest paths first."""
    n = range(len(topo.names))
    out = [(topo.names[i], topo.names[j], topo.links[i][j]) for i, j in itertools.combinations(n, 2)]
    order = list(LINK_MEANINGS)  # the legend lists the words fastest first

    def speed(p):
        key = _legend_word(p[2])
        rank = order.index(key) if key in order else len(order)
        return (rank, -int(p[2].strip()[2:])) if key == "NV#" else (rank, 0)

    return sorted(out, key=speed)


def format_matrix(names, rows) -> str:
    """A square matrix of words as text, labelled by ``names`` on both sides, in equal-width columns."""
    w = max([len(n) for n in names] + [4]) + 2
    lines = [" " * w + "".join(n.ljust(w) for n in names)]
    lines += [n.ljust(w) + "".join(c.ljust(w) for c in row) for n, row in zip(names, rows)]
    return "\n".join(lines)


def summary(topo: TopoMatrix) -> str:
    """A few lines: the matrix, then each GPU pair with what its link means."""
    lines = [format_matrix(topo.names, topo.links)]
    lines += [f"{a}-{b}: {word} = {link_meaning(word)}" for a, b, word in pairs(topo)]
    if any(word.startswith("NV") for _, _, word in pairs(topo)):
        lines.append(NV_NOTE)
    return "\n".join(lines)

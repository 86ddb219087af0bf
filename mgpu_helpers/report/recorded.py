"""The files of ``mgpu_helpers/data/`` (recordings, each naming where it was measured; the review questions; the
projection stylesheet), read here only. The course installs its checkout in editable mode, so :data:`DATA_DIR`
is a plain folder, which ``python -m mgpu_helpers.bench ncu`` writes new recordings into."""

import json
from pathlib import Path

from mgpu_helpers.models import topology

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def path(name: str) -> Path:
    """Where ``data/<name>`` lies; a recording the course does not have yet is a path that does not exist."""
    return DATA_DIR / name


def text(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


def read_json(name: str):
    return json.loads(text(name))


def topology_matrix() -> topology.TopoMatrix:
    """The ``nvidia-smi topo -m`` matrix recorded on a 2 x NVIDIA H200 host (NVLink NV18)."""
    return topology.parse_topo_matrix(text("topo_h200x2.txt"))


def nvlink_speeds() -> dict:
    """``{"GPU0": [GB/s of each link, ...]}`` of ``nvidia-smi nvlink -s`` on that host, per direction."""
    return topology.parse_nvlink_speeds(text("nvlink_h200x2.txt"))

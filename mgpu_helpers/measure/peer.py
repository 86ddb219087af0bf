"""Peer access and the paths between GPUs: can GPU i read GPU j's memory, how fast is a copy, what P2P is worth.
P2P off is ``NCCL_P2P_DISABLE=1`` (NCCL then goes through host memory), set for the ranks only (``env=``): the
notebook's own environment never changes. What needs two GPUs raises :class:`NeedsGpus`, :func:`measure_all` skips."""

import statistics

from mgpu_helpers.measure import diagnose, sweep, timing
from mgpu_helpers.models.topology import format_matrix as text_matrix
from mgpu_helpers.report import nccltests, sizes, tables
from mgpu_helpers.report.recorded import read_json

SIZES = (64 << 20, 256 << 20, 1 << 30)  # nccl-tests' sizes in that range (-b 1K -e 1G -f 4)


class NeedsGpus(RuntimeError):
    """A measurement needs more GPUs than this machine has; the message says what it needs."""


def gpu_count() -> int:
    """GPUs torch sees, without creating a CUDA context when there are none."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _need(count: int, what: str) -> None:
    if (have := gpu_count()) < count:
        recorded_figures = "The figures recorded on 2 x H200: peer.recorded() (python -m mgpu_helpers.bench peer)."
        raise NeedsGpus(f"{what} needs {count} NVIDIA GPUs; this machine has {have}. {recorded_figures}")


def peer_matrix() -> list[list[bool | None]]:
    """``m[i][j]``: can GPU i access GPU j's memory directly (None on the diagonal)."""
    import torch

    n = gpu_count()
    return [[None if i == j else bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)] for i in range(n)]


def format_matrix(matrix) -> str:
    """The matrix as ``nvidia-smi topo -p2p n`` prints it: X on the diagonal, OK / NS elsewhere."""
    if not matrix:
        return "(no GPUs)"
    cells = [["X" if v is None else ("OK" if v else "NS") for v in row] for row in matrix]
    return text_matrix([f"GPU{i}" for i in range(len(matrix))], cells)


def host_copy_GBps(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """GB/s of a copy in host memory (best of ``repeats``): the "link" between gloo ranks on one machine."""
    import torch

    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    best = min(timing.elapsed_s(lambda: dst.copy_(src), library=None) for _ in range(repeats))
    return timing.bandwidth_gbps(src.numel() * 4, best)


def _time_copy(dst, src, repeats: int) -> float:
    """Median seconds of ``dst.copy_(src)``: torch runs it on the source's current stream, so the events go there."""
    import torch

    with torch.cuda.device(src.device):  # the warm-up copy enables peer access between the pair
        times = timing.time_gpu(lambda: dst.copy_(src), repeats, warmup=1, library="torch")
    torch.cuda.synchronize(dst.device)
    return statistics.median(times)


def peer_copy(src: int = 0, dst: int = 1, nbytes: int = 256 << 20, repeats: int = 10) -> dict:
    """GB/s of ``nbytes`` GPU ``src`` -> GPU ``dst`` and back (medians of ``repeats``), the data checked after."""
    import torch

    _need(max(src, dst) + 1, "a peer copy")
    a = torch.arange(nbytes // 4, dtype=torch.float32, device=f"cuda:{src}")
    b = torch.empty_like(a, device=f"cuda:{dst}")
    there, back = _time_copy(b, a, repeats), _time_copy(a, b, repeats)
    assert torch.equal(a.cpu(), b.cpu()), "the peer copy changed the data"
    n, gbps, peer = a.numel() * 4, timing.bandwidth_gbps, bool(torch.cuda.can_device_access_peer(src, dst))
    return {f"{src}->{dst}": gbps(n, there), f"{dst}->{src}": gbps(n, back), "nbytes": n, "peer_access": peer}


def rank_env(p2p: bool) -> dict:
    return {"NCCL_P2P_DISABLE": "0" if p2p else "1"}


def allreduce_busbw(world_size: int, sizes, p2p: bool, backend: str, timeout: float, env=None):
    """``(SweepRows, RankResults)`` of one all-reduce sweep with P2P on or off."""
    args, env = (list(sizes), ("all_reduce",), None, 5), {**rank_env(p2p), **(env or {})}
    res = sweep.run_quiet(sweep.sweep_rank, world_size, args, backend, timeout, env)
    return sweep.combine(res.values, world_size, res.backend), res


def compare_p2p(world_size: int = 2, sizes=SIZES, backend: str = "nccl", timeout: float = 600.0) -> list[dict]:
    """Per size, busbw (GB/s) with P2P on and off, and off / on. ``backend="gloo"`` tests the plumbing only."""
    if backend == "nccl":
        _need(world_size, "the all-reduce with and without NCCL P2P")
    on, _ = allreduce_busbw(world_size, sizes, True, backend, timeout)
    off, _ = allreduce_busbw(world_size, sizes, False, backend, timeout)
    return [
        {"nbytes": a.nbytes, "busbw_default": a.busbw, "busbw_p2p_off": b.busbw}
        | {"ratio": b.busbw / a.busbw if a.busbw else None, "backend": a.backend}
        for a, b in zip(on, off)
    ]


def p2p_effect(world_size: int = 2, nbytes: int = 1 << 30, timeout: float = 300.0) -> dict:
    """``{"on"/"off": {"busbw", "transports", "lines"}}`` of one all-reduce each way under ``NCCL_DEBUG=INFO``."""
    _need(world_size, "the all-reduce with and without NCCL P2P")
    out = {}
    for key, p2p in (("on", True), ("off", False)):
        (row,), res = allreduce_busbw(world_size, [int(nbytes)], p2p, "nccl", timeout, {"NCCL_DEBUG": "INFO"})
        lines = [f"[rank {r}] {ln}" for r, rank_lines in enumerate(res.outputs) for ln in rank_lines if "NCCL" in ln]
        via = [ln for ln in lines if " via " in ln]
        out[key] = {"busbw": row.busbw, "transports": diagnose.transports(lines), "lines": via}
    return out


def recorded() -> dict:
    """The 2 x H200 figures, with nccl-tests' busbw for :data:`SIZES`."""
    rec = read_json("peer_h200x2.json")
    rec["allreduce_busbw_default_GBps"] = {n: nccltests.reference_busbw("all_reduce", n) for n in SIZES}
    rec["nvlink_GBps_per_gpu"] = rec["nvlink_links_per_gpu"] * rec["nvlink_link_GBps"]
    return rec


def measure_all(world_size: int = 2, copy_bytes: int = 256 << 20) -> dict:
    """Everything this machine can measure, and why the rest was skipped."""
    out = {"matrix": peer_matrix(), "copy": None, "busbw": None, "skipped": []}
    for key, fn in (("copy", lambda: peer_copy(0, 1, copy_bytes)), ("busbw", lambda: compare_p2p(world_size))):
        try:
            out[key] = fn()
        except NeedsGpus as exc:
            out["skipped"].append(str(exc))
    return out


def format_report(measured: dict, rec: dict | None = None) -> str:
    rec = recorded() if rec is None else rec
    lines = [
        "peer access (measured here):",
        format_matrix(measured["matrix"]),
        f"recorded on {rec['machine']}: " + format_matrix(rec["peer_access"]).replace("\n", " | "),
        f"NVLink recorded: {rec['nvlink_links_per_gpu']} links x {rec['nvlink_link_GBps']} GB/s = "
        f"{rec['nvlink_GBps_per_gpu']:.0f} GB/s per GPU and direction",
        "",
    ]
    recorded_copy = f"recorded GPU0 -> GPU1 {rec['peer_copy_GBps']['0->1']:.1f} GB/s"
    if c := measured.get("copy"):
        pairs = ", ".join(f"GPU{k.replace('->', ' -> GPU')} {c[k]:.1f} GB/s" for k in c if "->" in k)
        lines.append(f"peer copy ({sizes.format_bytes(c['nbytes'])}): {pairs}; {recorded_copy}")
    else:
        lines.append(f"peer copy: not measured here; {recorded_copy}")
    ref_off = {int(k): v for k, v in rec.get("allreduce_busbw_p2p_disabled_GBps", {}).items()}
    ref = rec["allreduce_busbw_default_GBps"]
    rows = [dict(r, nccl_tests=ref.get(r["nbytes"]), off=ref_off.get(r["nbytes"])) for r in measured.get("busbw") or []]
    rows = rows or [{"nbytes": n, "nccl_tests": v} for n, v in ref.items()]
    columns = [("size", "size", "{}"), ("busbw_default", "busbw default", "{:.1f}")]
    columns += [("busbw_p2p_off", "P2P off", "{:.1f}"), ("ratio", "off/default", "{:.2f}")]
    columns += [("nccl_tests", "nccl-tests", "{}"), ("off", "recorded P2P off", "{}")]
    lines.append(tables.format_table([dict(r, size=sizes.format_bytes(r["nbytes"])) for r in rows], columns))
    lines += [f"skipped: {m}" for m in measured.get("skipped", [])]
    return "\n".join(lines)

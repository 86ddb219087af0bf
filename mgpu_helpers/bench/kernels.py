"""Vector-add bandwidth: ``python -m mgpu_helpers.bench kernels [--n N] [--repeats R] [--smoke] [--json PATH]``.

Each row is also a % of torch.add measured in the same run, beside the figures recorded on an H200; the fast and
grid-stride kernels' recorded figures come from a later run with its own torch.add, printed below the table.
Without a GPU it prints the recorded figures; ``--smoke`` then checks the Numba kernels in the CUDA simulator.
"""

import json
import statistics
from dataclasses import dataclass

from mgpu_helpers import course
from mgpu_helpers.bench import arguments
from mgpu_helpers.measure import timing
from mgpu_helpers.report import progress, tables
from mgpu_helpers.report.recorded import read_json

BLOCKS = (128, 256, 512, 1024)

# (row key, label, key in the reference file)
ROWS = [
    ("torch_copy", "torch copy  (dst.copy_(src))", "torch_copy_GBps"),
    ("torch_add", "torch.add   (ceiling)", "torch_add_GBps"),
    *[(f"numba_bs{b}", f"Numba vecAdd, block {b}", f"numba_vecadd_bs{b}_GBps") for b in BLOCKS],
    ("cupy_raw", "CuPy RawKernel (seed C), block 256", "cupy_raw_vecadd_bs256_GBps"),
    ("cupy_elementwise", "CuPy ElementwiseKernel", "cupy_elementwise_vecadd_GBps"),
    ("numba_grid_stride", "Numba grid-stride (4 per trip, one wave)", None),
    ("cupy_grid_stride", "CuPy grid-stride (float4, one wave)", None),
    ("numba_fast", "Numba fast (4 per thread, full grid)", None),
    ("cupy_fast", "CuPy fast (float4, full grid)", None),
]
LABELS = {key: label for key, label, _ in ROWS}
FAST_TARGET = 0.95  # the fast kernels should reach 95% of torch.add


def reference() -> dict:
    """The recorded H200 figures: ``{"source", "gbps": {row key: GB/s}, "raw": the file's dict}``."""
    raw = read_json("kernels_h200x2.json")
    gbps = {key: raw[ref] for key, _, ref in ROWS if ref and ref in raw}
    return {"source": raw.get("_source", ""), "gbps": gbps, "raw": raw}


def fast_reference() -> dict:
    """The fast and grid-stride kernels' H200 figures, with GB/s and % of that run's own torch.add by row key."""
    raw = read_json("kernels_h200_fast.json")
    rows = {key: raw["kernels"][label] for key, label in raw["rows"].items()}
    gbps, pct = ({k: v[i] for k, v in rows.items()} for i in (0, 1))
    return {"source": raw["_source"], "torch_add": raw["torch_add_GBps"], "gbps": gbps, "pct": pct, "raw": raw}


def format_fast_reference(ref: dict | None = None) -> str:
    ref = fast_reference() if ref is None else ref
    width = max(len(LABELS[k]) for k in ref["gbps"])
    lines = [f"recorded on one H200, N = 2**28 float32, torch.add {ref['torch_add']:.0f} GB/s in the same run:"]
    row = "  {:{}s} | {:7.0f} GB/s | {:5.1f}% of torch.add"
    lines += [row.format(LABELS[k], width, v, ref["pct"][k]) for k, v in ref["gbps"].items()]
    return "\n".join(lines)


@dataclass
class Table:
    """Measured and recorded GB/s per row key (missing = not measured / not recorded)."""

    measured: dict
    recorded: dict
    title: str = ""


def format_table(table: Table) -> str:
    """kernel | measured GB/s | % of torch.add | H200 GB/s | % of torch.add."""
    pct = lambda v, base: f"{100 * v / base:.0f}%" if v is not None and base else None
    gb = lambda v: None if v is None else f"{v:.1f}" if v >= 10 else f"{v:.5f}"  # simulator figures are tiny
    m_add, r_add = table.measured.get("torch_add"), table.recorded.get("torch_add")
    got = [(label, table.measured.get(key), table.recorded.get(key)) for key, label, _ in ROWS]
    rows = [{"label": label, "m": gb(m), "m%": pct(m, m_add), "r": gb(r), "r%": pct(r, r_add)} for label, m, r in got]
    heads = (("label", "kernel"), ("m", "GB/s"), ("m%", "% add"), ("r", "H200 ref"), ("r%", "% add"))
    return tables.format_table(rows, [(key, head, "{}") for key, head in heads], sep=" | ", title=table.title)


def fast_verdict(measured: dict) -> list[str]:
    base = measured.get("torch_add")
    fractions = {key: measured[key] / base for key in ("numba_fast", "cupy_fast") if base and measured.get(key)}
    verdict = lambda frac: f"{'meets' if frac >= FAST_TARGET else 'MISSES'} the {100 * FAST_TARGET:.0f}% target"
    return [f"{LABELS[key]}: {100 * frac:.1f}% of torch.add ({verdict(frac)})" for key, frac in fractions.items()]


def _gbps(fn, nbytes: int, repeats: int, library: str, warmup: int = 2) -> float:
    return timing.bandwidth_gbps(nbytes, statistics.median(timing.time_gpu(fn, repeats, warmup, library)))


def _checked_gbps(fn, result, want, what: str, nbytes: int, repeats: int, library: str) -> float:
    """:func:`_gbps` after one checked run of ``fn`` (Numba's and CuPy's launches share the default stream)."""
    import cupy as cp

    result.fill(0)
    cp.cuda.Device().synchronize()
    fn()
    cp.cuda.Device().synchronize()
    assert bool(cp.array_equal(result, want)), f"{what} gave a wrong result"
    return _gbps(fn, nbytes, repeats, library)


def _numba_rows(n: int, da, db, dc, wave=None, full=None) -> dict:
    """The Numba launches by row key; ``wave``, ``full``: the grids, worked out before timing (None: the launchers')."""
    from mgpu_helpers.lessons import cuda_model as CM
    from mgpu_helpers.lessons import cupy_kernels as CK

    rows = {f"numba_bs{b}": (lambda b=b: CM.vec_add[CM.launch_config(n, b)](da, db, dc, n)) for b in BLOCKS}
    rows["numba_grid_stride"] = lambda: CK.vec_add_grid_stride_launch(da, db, dc, grid=wave)
    return rows | {"numba_fast": lambda: CK.vec_add_fast_launch(da, db, dc, grid=full)}


def measure(n: int, repeats: int) -> dict:
    """{row key: GB/s} on the current GPU, each kernel's result checked."""
    import cupy as cp
    import numpy as np
    import torch
    from numba import cuda

    from mgpu_helpers.lessons import cupy_kernels as CK

    out, f32 = {}, 4
    # torch: the ceilings.
    ta, tb = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    tc = torch.empty_like(ta)
    out["torch_copy"] = _gbps(lambda: tc.copy_(ta), 2 * n * f32, repeats, "torch")
    out["torch_add"] = _gbps(lambda: torch.add(ta, tb, out=tc), 3 * n * f32, repeats, "torch")
    assert torch.equal(tc, ta + tb), "torch.add gave a wrong result"
    ta = tb = tc = None  # frees the buffers before the next ceiling is measured
    torch.cuda.empty_cache()

    # CuPy: the seed's C kernel, the ElementwiseKernel, the fast float4 kernel.
    ca, cb = cp.random.random(n, dtype=cp.float32), cp.random.random(n, dtype=cp.float32)
    cc, want = cp.empty_like(ca), ca + cb
    cupy_rows = {
        "cupy_raw": lambda: CK.vec_add_cupy_raw(ca, cb, cc, block=256),
        "cupy_elementwise": lambda: CK.vec_add_cupy_elementwise(ca, cb, cc),
        "cupy_grid_stride": lambda: CK.vec_add_cupy_grid_stride(ca, cb, cc),
        "cupy_fast": lambda: CK.vec_add_cupy_fast(ca, cb, cc),
    }
    for key, fn in progress.iterate(cupy_rows.items(), "CuPy kernels"):
        out[key] = _checked_gbps(fn, cc, want, key, 3 * n * f32, repeats, "cupy")

    # Numba: its own arrays (device-to-device copies of the CuPy inputs), checked against the same sum.
    cp.cuda.Device().synchronize()
    da, db, dc = (cuda.device_array(n, dtype=np.float32) for _ in range(3))
    da.copy_to_device(cuda.as_cuda_array(ca, sync=False))
    db.copy_to_device(cuda.as_cuda_array(cb, sync=False))
    CK.vec_add_grid_stride_launch(da, db, dc)  # compile, so the one-wave grid is known before timing
    grids = CK.one_wave_grid(CK.vec_add_grid_stride), CK.fast_launch_grid(n)
    for key, fn in progress.iterate(_numba_rows(n, da, db, dc, *grids).items(), "Numba kernels"):
        out[key] = _checked_gbps(fn, cp.asarray(dc), want, key, 3 * n * f32, repeats, "numba")
    return out


def block_sweep(n: int, blocks=(32, 64, 128, 256, 512, 1024), repeats: int = 10) -> dict:
    """GB/s of the seed's kernel (CuPy and Numba) and the ElementwiseKernel per block size, beside CuPy's copy."""
    import cupy as cp
    from numba import cuda

    from mgpu_helpers.lessons import cuda_model as CM
    from mgpu_helpers.lessons import cupy_kernels as CK

    a, b = cp.random.random(n, dtype=cp.float32), cp.random.random(n, dtype=cp.float32)
    c, want = cp.empty_like(a), a + b
    nbytes = 3 * n * 4  # vecAdd reads a and b, writes c
    out = {"copy": _gbps(lambda: cp.copyto(c, a), 2 * n * 4, repeats, "cupy")}
    out |= {name: {} for name in ("raw", "numba", "elementwise")}  # {block: GB/s} each
    ew = CK.elementwise_add()
    da, db, dc = (cuda.as_cuda_array(x, sync=False) for x in (a, b, c))  # zero-copy views, same stream
    for bs in progress.iterate(blocks, "block sizes"):
        runs = [  # (name, the library whose events time it, the launch)
            ("raw", "cupy", lambda: CK.vec_add_cupy_raw(a, b, c, block=bs)),
            ("elementwise", "cupy", lambda: ew(a, b, c, block_size=bs)),
            ("numba", "numba", lambda: CM.vec_add[CM.launch_config(n, bs)](da, db, dc, n)),
        ]
        for name, lib, fn in runs:
            out[name][bs] = _checked_gbps(fn, c, want, f"{name} at block {bs}", nbytes, repeats, lib)
    return out


def smoke(n: int) -> dict:
    """The Numba kernels in the simulator, checked against NumPy (their GB/s say nothing about a GPU)."""
    import numpy as np
    from numba import cuda

    rng = np.random.default_rng(0)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array(n, dtype=np.float32)
    out = {}
    for key, fn in _numba_rows(n, da, db, dc).items():
        dc.copy_to_device(np.zeros(n, np.float32))
        out[key] = _gbps(fn, 3 * n * 4, repeats=1, library="numba", warmup=0)
        if not np.array_equal(dc.copy_to_host(), a + b):
            raise AssertionError(f"{key}: wrong result in the simulator")
    return out


def main(argv: list[str]) -> int:
    p = arguments("kernels", __doc__)
    p.add_argument("--n", type=int, default=None, help="elements per vector (default 2**28; 4096 with --smoke)")
    p.add_argument("--repeats", type=int, default=20, help="timed runs per kernel; the median is reported")
    p.add_argument("--smoke", action="store_true", help="without a GPU: run the Numba kernels in the simulator")
    p.add_argument("--json", metavar="PATH", help="also write the measured GB/s to PATH")
    args = p.parse_args(argv)
    env = course.setup(show=False, prewarm=False)  # simulator on before numba is imported when there is no GPU
    ref = reference()
    print(f"reference: {ref['source']}")
    if env.mode != "gpu":
        why = env.machine.note or "no GPU"
        print(f"\nbench kernels needs an NVIDIA GPU; none found here ({why}). Recorded figures:\n")
        recorded = format_table(Table({}, ref["gbps"], title="N = 2**28 float32, H200 (recorded)"))
        print(recorded, format_fast_reference(), sep="\n\n")
        if not args.smoke:
            print("\n(run with --smoke to check the Numba kernels in the CUDA simulator)")
            return 0
        n, device = args.n or 4096, "simulator"
        measured = smoke(n)
        speed = "(simulator GB/s below are Python speed, not GPU speed)"
        print(f"\nsmoke: Numba kernels in the CUDA simulator, N = {n}: results equal NumPy's a + b {speed}\n")
        print(format_table(Table(measured, ref["gbps"], title="simulator smoke")))
    else:
        n, device = args.n or 2**28, env.gpus[0].name
        print(f"measuring on GPU 0 ({device}), N = {n} float32, median of {args.repeats} runs, CUDA events\n")
        measured = measure(n, args.repeats)
        table = format_table(Table(measured, ref["gbps"], title=f"{device}, N = {n}"))
        print(table, format_fast_reference(), sep="\n\n", end="\n\n")
        print(*fast_verdict(measured), sep="\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"n": n, "device": device, "GBps": measured}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


def draw_bandwidth(bars: dict, ceilings: dict | None = None, title: str = ""):
    """Horizontal bars of GB/s, with dashed lines at ``ceilings`` (e.g. the device's copy bandwidth)."""
    import matplotlib.pyplot as plt

    from mgpu_helpers.widgets import style

    labels, small = list(bars), style.current().font_size * 0.8
    fig, ax = plt.subplots(figsize=style.figsize(7.5, 1.4 + 0.38 * len(labels)))
    colours = [style.PALETTE["orange"] if "fast" in lab.lower() else style.PALETTE["blue"] for lab in labels]
    drawn = ax.barh(range(len(labels)), [bars[k] for k in labels], color=colours)
    ax.bar_label(drawn, [f" {bars[k]:,.0f}" for k in labels], fontsize=small)
    lines = [style.PALETTE["vermillion"], style.PALETTE["green"], style.PALETTE["black"]]
    for (name, value), colour in zip((ceilings or {}).items(), lines):
        ax.axvline(value, ls="--", color=colour, lw=style.current().line_width, label=f"{name}: {value:,.0f} GB/s")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("effective bandwidth, GB/s (bytes read + written / time)")
    ax.set_xlim(0, 1.15 * max([*bars.values(), *(ceilings or {}).values()]))
    if ceilings:
        below = (0.5, -0.16 - 0.6 / len(labels))
        ax.legend(loc="upper center", bbox_to_anchor=below, ncol=len(ceilings), frameon=False, fontsize=small)
    ax.set_title(title, fontsize=style.current().font_size)
    fig.tight_layout()
    return fig

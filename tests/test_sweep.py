"""The collective sweep: complete rows on 2 gloo ranks, nccl-tests formulas, the recorded reference tables."""
import pytest

from mgpu_helpers.models import perfmodel
from mgpu_helpers.measure import sweep
from mgpu_helpers.bench import collectives as bench

SIZES = [1024, 8192, 65536]


@pytest.fixture(scope="module")
def rows():
    return sweep.run_sweep(2, SIZES, iters=2, warmup=1, backend="gloo", timeout=120)


def test_sweep_gives_a_complete_row_for_every_op_and_size(rows):
    assert [(r.op, r.nbytes) for r in rows] == [(op, n) for n in SIZES for op in sweep.OPS]
    for r in rows:
        assert r.time_us > 0 and r.algbw > 0 and r.busbw > 0
        assert r.world_size == 2 and r.backend == "gloo" and r.iters == 2


def test_sweep_applies_the_nccl_tests_busbw_formulas(rows):
    for r in rows:
        seconds = r.time_us / 1e6
        assert r.algbw == pytest.approx(r.nbytes / seconds / 1e9)
        assert r.busbw == pytest.approx(perfmodel.busbw(sweep.BUSBW_AS[r.op], r.nbytes, seconds, 2) / 1e9)
    by_op = {r.op: r for r in rows if r.nbytes == 1024}
    # 2 ranks: all-reduce busbw = algbw * 2 * 1/2, reduce-scatter/all-gather busbw = algbw / 2
    assert by_op["all_reduce"].busbw == pytest.approx(by_op["all_reduce"].algbw)
    assert by_op["all_gather"].busbw == pytest.approx(by_op["all_gather"].algbw / 2)
    assert by_op["rs_ag"].busbw == pytest.approx(by_op["rs_ag"].algbw)


def test_progress_callback_sees_every_size():
    seen = []
    rows = sweep.run_sweep(2, [1024, 4096], ops=("all_reduce",), iters=1, warmup=0, backend="gloo",
                           progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 2), (1, 2), (2, 2)] and len(rows) == 2


def test_sizes_are_rounded_to_whole_float32_elements_per_rank():
    rows = sweep.run_sweep(3, [1000], ops=("reduce_scatter",), iters=1, warmup=0, backend="gloo")
    assert rows[0].nbytes == 996     # 83 floats per rank x 3 ranks x 4 bytes


def test_reference_parser_reads_every_recorded_nccl_tests_file():
    for op in ("all_reduce", "reduce_scatter", "all_gather", "sendrecv"):
        ref = sweep.load_reference(op)
        assert [r["nbytes"] for r in ref] == sweep.sizes_between(1024, 1 << 30, 4)
        assert any("nccl-tests" in line for line in sweep.reference_header(op))
    big = sweep.load_reference("all_reduce")[-1]
    assert (big["time_us"], big["algbw"], big["busbw"]) == (3281.55, 327.21, 327.21)
    assert big["inplace_busbw"] == 329.58
    # like for like: all_reduce runs in place, reduce_scatter / all_gather out of place
    assert sweep.reference_busbw("all_reduce", 1 << 30) == 329.58
    assert sweep.reference_busbw("all_gather", 1 << 30) == 270.71
    assert sweep.reference_busbw("reduce_scatter", 1 << 30) == 278.80
    assert sweep.reference_busbw("all_gather", 1 << 30, inplace=True) == 289.32
    assert sweep.reference_busbw("all_reduce", 1000) is None


def test_reference_busbw_agrees_with_its_own_time_by_the_formula():
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for r in sweep.load_reference(op)[-3:]:
            assert perfmodel.busbw(op, r["nbytes"], r["time_us"] / 1e6, 2) / 1e9 == pytest.approx(r["busbw"], abs=0.01)


def test_gloo_rows_are_not_compared_with_the_nccl_reference(rows):
    assert all(d["ratio"] is None for d in sweep.compare_with_reference(rows))
    nccl_row = sweep.SweepRow("all_reduce", 1 << 30, 3400.0, 315.8, 315.8, 2, "nccl", 20)
    d = sweep.compare_with_reference([nccl_row])[0]
    assert d["ref_busbw"] == 329.58 and d["ratio"] == pytest.approx(315.8 / 329.58)
    assert bench.target_check([nccl_row]) == []                      # 4% below: within the 5% target
    slow = sweep.SweepRow("all_reduce", 1 << 30, 3600.0, 298.3, 298.3, 2, "nccl", 20)
    assert "all_reduce 1 GiB" in bench.target_check([slow])[0]      # 9.5% below: missed


def test_table_lists_every_row(rows):
    text = sweep.format_table(rows)
    assert len(text.splitlines()) == 2 + len(rows) and "busbw" in text and "32 KiB" not in text


def test_bench_size_options_understand_binary_units():
    assert [bench.parse_size(s) for s in ("1K", "64M", "1G", "4096")] == [1024, 64 << 20, 1 << 30, 4096]
    with pytest.raises(Exception, match="not a size"):
        bench.parse_size("lots")


def test_bench_runs_a_small_gloo_sweep(capsys):
    assert bench.main(["--world-size", "2", "--backend", "gloo", "--min-bytes", "1K", "--max-bytes", "1K",
                       "--iters", "1", "--ops", "all_reduce"]) == 0
    out = capsys.readouterr().out
    assert "all_reduce" in out and "1 KiB" in out

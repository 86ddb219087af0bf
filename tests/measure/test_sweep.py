"""The collective sweep: complete rows on 2 gloo ranks, nccl-tests formulas, the recorded reference tables,
sizes read and written, the one text table."""

import pytest

from mgpu_helpers.bench import collectives as bench
from mgpu_helpers.measure import sweep
from mgpu_helpers.models import bandwidth
from mgpu_helpers.report import nccltests, sizes, tables

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
        assert r.busbw == pytest.approx(bandwidth.busbw(sweep.BUSBW_AS[r.op], r.nbytes, seconds, 2) / 1e9)
    by_op = {r.op: r for r in rows if r.nbytes == 1024}
    # 2 ranks: all-reduce busbw = algbw * 2 * 1/2, reduce-scatter/all-gather busbw = algbw / 2
    assert by_op["all_reduce"].busbw == pytest.approx(by_op["all_reduce"].algbw)
    assert by_op["all_gather"].busbw == pytest.approx(by_op["all_gather"].algbw / 2)
    assert by_op["rs_ag"].busbw == pytest.approx(by_op["rs_ag"].algbw)


def test_progress_moves_once_per_size_and_rows_are_the_same_as_one_launch(capsys):
    rows = sweep.run_sweep(2, [1024, 4096], ops=("all_reduce",), iters=1, warmup=0, backend="gloo", progress="sizes")
    out = capsys.readouterr().out
    assert "sizes: 100%" in out and "2/2" in out
    assert [(r.op, r.nbytes) for r in rows] == [("all_reduce", 1024), ("all_reduce", 4096)]


def test_the_real_progress_bar_is_tqdm(capsys):
    from tqdm.auto import tqdm

    from mgpu_helpers.report import progress

    update, close = progress.callback("sizes")
    update(0, 3)
    update(3, 3)
    close()
    assert "sizes: 100%" in capsys.readouterr().out
    with progress.bar(3, "sizes") as bar:
        assert isinstance(bar, tqdm) and bar.total == 3


def test_sizes_are_rounded_to_whole_float32_elements_per_rank():
    rows = sweep.run_sweep(3, [1000], ops=("reduce_scatter",), iters=1, warmup=0, backend="gloo")
    assert rows[0].nbytes == 996  # 83 floats per rank x 3 ranks x 4 bytes


def test_reference_parser_reads_every_recorded_nccl_tests_file():
    for op in ("all_reduce", "reduce_scatter", "all_gather", "sendrecv"):
        ref = nccltests.load_reference(op)
        assert [r["nbytes"] for r in ref] == sizes.sizes_between(1024, 1 << 30, 4)
        assert any("nccl-tests" in line for line in nccltests.reference_header(op))
    big = nccltests.load_reference("all_reduce")[-1]
    assert (big["time_us"], big["algbw"], big["busbw"]) == (3281.55, 327.21, 327.21)
    assert big["inplace_busbw"] == 329.58
    # like for like: all_reduce runs in place, reduce_scatter / all_gather out of place
    assert nccltests.reference_busbw("all_reduce", 1 << 30) == 329.58
    assert nccltests.reference_busbw("all_gather", 1 << 30) == 270.71
    assert nccltests.reference_busbw("reduce_scatter", 1 << 30) == 278.80
    assert nccltests.reference_busbw("all_gather", 1 << 30, inplace=True) == 289.32
    assert nccltests.reference_busbw("all_reduce", 1000) is None


def test_reference_busbw_agrees_with_its_own_time_by_the_formula():
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for r in nccltests.load_reference(op)[-3:]:
            assert bandwidth.busbw(op, r["nbytes"], r["time_us"] / 1e6, 2) / 1e9 == pytest.approx(r["busbw"], abs=0.01)


def test_gloo_rows_are_not_compared_with_the_nccl_reference(rows):
    assert all(d["ratio"] is None for d in nccltests.compare_with_reference(rows))
    nccl_row = sweep.SweepRow("all_reduce", 1 << 30, 3400.0, 315.8, 315.8, 2, "nccl", 20)
    d = nccltests.compare_with_reference([nccl_row])[0]
    assert d["ref_busbw"] == 329.58 and d["ratio"] == pytest.approx(315.8 / 329.58)
    assert bench.target_check([nccl_row]) == []  # 4% below: within the 5% target
    slow = sweep.SweepRow("all_reduce", 1 << 30, 3600.0, 298.3, 298.3, 2, "nccl", 20)
    assert "all_reduce 1 GiB" in bench.target_check([slow])[0]  # 9.5% below: missed


def test_sweep_table_lists_every_row_and_the_reference_only_for_nccl(rows):
    text = nccltests.sweep_table(rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows) and "busbw" in lines[0] and "nccl-tests" in lines[0]
    assert all(line.rstrip().endswith("-") for line in lines[2:])  # gloo: no reference
    assert "8 KiB" in text and "32 KiB" not in text
    nccl_row = sweep.SweepRow("all_reduce", 1 << 30, 3400.0, 315.8, 315.8, 2, "nccl", 20)
    assert nccltests.sweep_table([nccl_row]).splitlines()[2].split()[-2:] == ["329.58", "0.96"]


def test_text_and_markdown_tables_share_one_column_description():
    cols = [("name", "name", "{}"), ("x", "x (us)", "{:.1f}")]
    rows = [{"name": "a|b", "x": 1.25}, {"name": "long name", "x": None}]
    text = tables.format_table(rows, cols).splitlines()
    assert text[0] == "name       x (us)" and set(text[1]) == {"-"}
    assert text[2] == "a|b           1.2" and text[3] == "long name       -"
    assert tables.markdown_table(rows, cols).splitlines()[2] == "| a\\|b | 1.2 |"


def test_text_tables_align_chinese_by_display_width_and_take_a_separator_and_title():
    cols = [("name", "策略", "{}"), ("gb", "GB", "{:g}")]
    rows = [{"name": "整份复制", "gb": 36}, {"name": "ZeRO-3", "gb": 9}]
    text = tables.format_table(rows, cols, sep=" | ", title="4 个 Rank").splitlines()
    assert text[0] == "4 个 Rank"
    assert text[1] == "策略     | GB" and text[2] == "-" * 13  # 策略: four columns wide, not two
    assert text[3] == "整份复制 | 36" and text[4] == "ZeRO-3   |  9"
    notes = tables.format_table(
        [{"k": "a", "v": 1, "note": "x"}, {"k": "b", "v": 22, "note": "longer"}],
        [("k", "k", "{}"), ("v", "v", "{}"), ("note", "note", "{}")],
        left={"note"},
    )
    assert notes.splitlines()[2:] == ["a   1  x", "b  22  longer"]  # text left, numbers right


@pytest.mark.parametrize(
    "text,nbytes",
    [("1K", 1024), ("64M", 64 << 20), ("1G", 1 << 30), ("4096", 4096), ("1 MiB", 1 << 20), ("2kb", 2048), ("3B", 3)],
)
def test_one_size_grammar_for_every_command(text, nbytes):
    assert sizes.parse_size(text) == nbytes
    assert sizes.parse_size(sizes.format_bytes(nbytes)) == nbytes


@pytest.mark.parametrize("text", ["lots", "1.5M", "0", "-1K", "1T", ""])
def test_sizes_that_cannot_be_read_say_how_to_write_one(text):
    with pytest.raises(ValueError, match="not a size.*e.g. 4096, 1K, 64M, 1G"):
        sizes.parse_size(text)


def test_float32_elements_split_evenly_over_the_ranks():
    assert sizes.float32_elements(1000, 3) == 249 and sizes.float32_elements(1, 4) == 4
    with pytest.raises(ValueError, match="world_size"):
        sizes.float32_elements(1024, 0)


def test_bench_refuses_a_size_it_cannot_read(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--max-bytes", "lots"])
    assert "not a size: 'lots'" in capsys.readouterr().err


def test_bench_runs_a_small_gloo_sweep(capsys):
    assert (
        bench.main(
            [
                "--world-size",
                "2",
                "--backend",
                "gloo",
                "--min-bytes",
                "1K",
                "--max-bytes",
                "1K",
                "--iters",
                "1",
                "--ops",
                "all_reduce",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "all_reduce" in out and "1 KiB" in out


def test_recorded_split_is_computed_from_the_three_files():
    rec = nccltests.recorded_split(1 << 30)
    assert (rec["reduce_scatter_busbw"], rec["all_gather_busbw"], rec["all_reduce_busbw"]) == (278.80, 270.71, 327.21)
    assert rec["rs_ag_us"] == pytest.approx(1925.64 + 1983.22)
    assert rec["time_ratio"] == pytest.approx((1925.64 + 1983.22) / 3281.55)
    assert rec["busbw_ratio"] == pytest.approx(1 / rec["time_ratio"], rel=2e-3)
    # two launches' fixed cost: the smallest recorded reduce-scatter (4 KiB) and all-gather (4 KiB) times
    assert rec["launch_us"] == pytest.approx(14.19 + 14.05)
    assert rec["launch_us"] / (rec["rs_ag_us"] - rec["all_reduce_us"]) < 0.05
    inplace = nccltests.recorded_split(1 << 30, inplace=True)
    assert inplace["all_reduce_us"] == 3257.86 and inplace["rs_ag_us"] == pytest.approx(1914.72 + 1855.62)
    with pytest.raises(ValueError, match="no recorded row at 1000 bytes"):
        nccltests.recorded_split(1000)


def test_all_reduce_reaches_half_its_recorded_busbw_at_16_mib():
    assert nccltests.half_busbw_size("all_reduce") == 16 << 20
    curves = nccltests.reference_curves()
    assert set(curves) == {"all_reduce", "reduce_scatter", "all_gather"}
    assert curves["all_reduce"][-1] == (1 << 30, 329.58)


def test_repeated_rounds_time_both_operations_in_one_launch():
    from mgpu_helpers.measure import sweep as sw

    rounds = sw.run_repeats(2, 1 << 12, repeats=3, backend="gloo", iters=2)
    assert len(rounds) == 3 and all(set(r) == {"all_reduce", "rs_ag"} and min(r.values()) > 0 for r in rounds)


def test_per_rank_wait_is_read_in_microseconds_per_size():
    from mgpu_helpers.measure import sweep as sw

    per_rank = [
        [{"nbytes": 4, "compute": 1.0, "wait": 0.002, "communicate": 0.1}],
        [{"nbytes": 4, "compute": 1.0, "wait": 0.0005, "communicate": 0.1}],
    ]
    assert sw.per_rank_wait_us(per_rank) == [[2000.0], [500.0]]

"""Nsight Compute figures: the CSV parser, the labelling of launches, the recorded table, the no-ncu path."""

from __future__ import annotations

import json
import os

import pytest

from mgpu_helpers.bench import ncu

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "ncu_vecadd_sample.csv")


def sample() -> str:
    with open(SAMPLE, encoding="utf-8") as f:
        return f.read()


def test_the_parser_gives_one_row_per_launch_with_the_four_metrics():
    rows = ncu.parse_csv(sample())
    assert [r["id"] for r in rows] == list(range(6))
    assert [r["block_size"] for r in rows] == [128, 256, 512, 1024, 256, 256]
    assert [r["registers_per_thread"] for r in rows] == [16, 16, 16, 16, 22, 20]
    assert rows[1]["achieved_occupancy_pct"] == pytest.approx(74.79)
    assert rows[1]["dram_throughput_pct"] == pytest.approx(65.30)
    assert "vec_add[" in rows[0]["kernel"] and rows[5]["kernel"] == "vecAddFast"


def test_launches_are_named_after_the_child_scripts_plan():
    rows = ncu.label_rows(ncu.parse_csv(sample()))
    assert [r["kernel"] for r in rows] == [p[0] for p in ncu.PLAN]
    assert rows[4]["kernel"].startswith("Numba vec_add_fast") and rows[4]["registers_per_thread"] == 22


def test_a_launch_the_script_does_not_make_is_an_error():
    text = (
        sample()
        .replace('"(128, 1, 1)"', '"(64, 1, 1)"')
        .replace('"launch__block_size","","128"', '"launch__block_size","","64"')
    )
    with pytest.raises(ValueError, match="not one the child script makes"):
        ncu.label_rows(ncu.parse_csv(text))


def test_output_without_csv_or_columns_says_what_is_missing():
    with pytest.raises(ValueError, match="--csv"):
        ncu.parse_csv("==PROF== Connected to process 1\n==PROF== No kernels were profiled.\n")
    with pytest.raises(ValueError, match="columns"):
        ncu.parse_csv('"a","b"\n"1","2"\n')


def test_the_child_script_compiles_and_the_command_leaves_the_clocks_alone():
    compile(ncu.CHILD.format(blocks=ncu.BLOCKS), "child.py", "exec")
    cmd = ncu.command("/usr/local/cuda/bin/ncu", "child.py", 1 << 24)
    assert cmd[1:3] == ["--clock-control", "none"] and "--csv" in cmd
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(ncu.METRICS)


def test_the_recorded_table_loads_names_its_machine_and_formats():
    rec = ncu.load("h200")
    assert rec["gpu"] == "NVIDIA H200" and rec["machine"] == "h200" and rec["date"] and rec["ncu_version"]
    assert {r["block_size"] for r in rec["rows"]} >= {128, 256, 1024}
    text = ncu.format_table(rec)
    assert "NVIDIA H200" in text and "Numba vec_add, block 256" in text
    assert ncu.load() == rec  # the only table recorded in the package


def test_a_record_written_by_main_round_trips(tmp_path, monkeypatch):
    rows = ncu.label_rows(ncu.parse_csv(sample()))
    rec = {
        "machine": "test",
        "gpu": "NVIDIA X",
        "date": "2026-12-01",
        "ncu_version": "2025.3.1.0",
        "n": 1 << 24,
        "command": "ncu ...",
        "rows": rows,
    }
    monkeypatch.setattr(ncu, "DATA_DIR", str(tmp_path))
    with open(ncu.path_for("test"), "w") as f:
        json.dump(rec, f)
    assert ncu.load("test") == rec and ncu.load() == rec
    assert "CuPy vecAddFast" in ncu.format_table(rec)


def test_without_ncu_it_says_so_and_fails(monkeypatch, capsys):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    assert ncu.main([]) == 1
    assert "ncu (Nsight Compute) is not installed" in capsys.readouterr().err


def test_machine_names_come_from_the_gpu():
    assert ncu.machine_name("NVIDIA H200") == "h200"
    assert ncu.machine_name("NVIDIA GeForce RTX 4090") == "geforce_rtx_4090"

"""The lab report: a Markdown file with its tables, and the figures as PNG files next to it."""

import os

import matplotlib

matplotlib.use("Agg")

import pytest

from mgpu_helpers.checks import lab as lab_checks
from mgpu_helpers.measure import sweep
from mgpu_helpers.models import topology
from mgpu_helpers.report import lab, nccltests, tables
from mgpu_helpers.widgets import bandwidth, rank_distribution
from mgpu_helpers.widgets import topology as topo_widget


def _rows():
    return [
        sweep.SweepRow("all_reduce", n, t, n / t / 1e3, n / t / 1e3, 2, "gloo", 5)
        for n, t in ((1024, 100.0), (32768, 200.0), (1 << 20, 900.0))
    ]


def test_report_is_written_with_its_table_and_images(tmp_path):
    rows = _rows()
    steps = [
        {
            "nbytes": r.nbytes,
            "compute_us": 500.0,
            "wait_us": 50.0,
            "comm_us": r.time_us,
            "efficiency": 500 / (550 + r.time_us),
        }
        for r in rows
    ]
    report = lab.LabReport("All-Reduce lab")
    report.add_text("Setup", "2 ranks, gloo")
    report.add_table("Sweep", nccltests.compare_with_reference(rows), lab.SWEEP_COLUMNS)
    report.add_figure("Bandwidth", "busbw", bandwidth.draw_busbw(rows), "busbw by size")
    report.add_figure("Step", "step", bandwidth.draw_step_breakdown(steps), "phases")
    path = report.write(str(tmp_path / "r1"))
    assert path == str(tmp_path / "r1" / "report.md")
    text = open(path, encoding="utf-8").read()
    assert text.startswith("# All-Reduce lab")
    assert "| op | size | bytes | time (us) |" in text
    assert "| all_reduce | 1 MiB | 1048576 | 900.0 |" in text
    assert "![busbw by size](busbw.png)" in text and "![phases](step.png)" in text
    for name in ("busbw.png", "step.png"):
        with open(tmp_path / "r1" / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_default_report_dir_is_a_timestamped_folder_under_lab_reports(tmp_path):
    d = lab.default_dir(str(tmp_path))
    assert os.path.dirname(d) == str(tmp_path / "lab_reports") and os.path.basename(d)[:2] == "20"


def test_markdown_table_escapes_pipes_and_shows_missing_values():
    text = tables.markdown_table([{"a": "x|y", "b": None}], [("a", "A", "{}"), ("b", "B", "{:.1f}")])
    assert text.splitlines()[-1] == "| x\\|y | - |"


def test_figure_names_must_be_safe_file_names():
    with pytest.raises(ValueError, match="figure name"):
        lab.LabReport("t").add_figure("x", "../evil", None)


def test_topology_matrix_draws_nvml_words_and_rejects_others():
    fig = topo_widget.draw_link_matrix([["X", "NV18"], ["NV18", "X"]], note="recorded")
    assert fig.axes[0].get_title() == "GPU topology"
    assert topology.link_class("NV4") == "NVLink" and topology.link_class("SYS").startswith("across")
    with pytest.raises(ValueError, match="link word"):
        topology.link_class("FAST")
    with pytest.raises(ValueError, match="square"):
        topo_widget.draw_link_matrix([["X", "NV1"]])


def test_rank_distribution_draws_one_box_per_rank_and_phase():
    per_phase = {"compute": [[0.01, 0.011], [0.03, 0.031]], "wait": [[0.02, 0.021], [0.0, 0.001]]}
    fig = rank_distribution.draw_rank_distribution(per_phase, highlight=1)
    assert [ax.get_title() for ax in fig.axes] == ["compute", "wait"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["rank 0", "rank 1 *"]


def test_lab_report_holds_the_learners_claims_their_verdicts_and_their_own_words(tmp_path):
    rows = _rows() + [
        sweep.SweepRow("rs_ag", n, t * 1.5, 1.0, 1.0, 2, "gloo", 5)
        for n, t in ((1024, 100.0), (32768, 200.0), (1 << 20, 900.0))
    ]
    steps = [
        {
            "nbytes": n,
            "compute_us": 500.0,
            "wait_us": w,
            "comm_us": c,
            "step_us": 500.0 + w + c,
            "efficiency": 500.0 / (500.0 + w + c),
        }
        for n, w, c in ((1024, 10.0, 100.0), (32768, 300.0, 200.0), (1 << 20, 10.0, 900.0))
    ]
    owners = [
        {
            "rank": r,
            "device": "cpu",
            "shard": (8 * r, 8 * r + 8),
            "local": 1.0,
            "result": 1240.0,
            "expected": 1240.0,
            "ok": True,
        }
        for r in range(2)
    ]
    review = [
        lab_checks.Verdict("1 KiB 上最大的是 compute", True, "测到 compute 500 us。"),
        lab_checks.Verdict("1 MiB 上最大的是 compute", False, "测到 communicate 900 us：最大的是 communicate。"),
        lab_checks.Verdict("1 MiB 上 RS+AG 的时间是 All-Reduce 的 1.50 倍", True, "测到 1.50 倍。"),
    ]
    compare = {"rows": [{"approach": "all_reduce", "result": "sum", "buffer": "1 MiB", "time": "1 us"}], "note": "n"}
    report = lab.build_report(
        "Lab",
        "setup",
        "GPU0 GPU1",
        owners,
        nccltests.compare_with_reference(rows),
        steps,
        compare,
        review,
        "我的结论：大消息输在通信。",
        {"busbw": ("busbw", bandwidth.draw_busbw(rows))},
    )
    path = report.write(str(tmp_path))
    text = open(path, encoding="utf-8").read()
    for heading in (
        "## 环境",
        "## 拓扑摘要",
        "## 逐 Rank 输出",
        "## 一步的时间拆分",
        "## 我的结论，逐条对照测量",
        "## 结论：一步的时间输在哪里",
    ):
        assert heading in text
    assert "| 1 | cpu | (8, 16) | 1 | 1240 | 1240 | yes |" in text
    assert "| 1 MiB 上最大的是 compute | 与测量矛盾 |" in text  # 900 us communicate vs 500 compute
    assert "| 1 KiB 上最大的是 compute | 支持 |" in text
    assert "| 1 MiB 上 RS+AG 的时间是 All-Reduce 的 1.50 倍 | 支持 |" in text
    assert text.rstrip().endswith("我的结论：大消息输在通信。")
    assert os.path.exists(tmp_path / "busbw.png")


def test_rs_ag_in_place_and_out_of_place_match_all_reduce_and_in_place_needs_no_extra_buffer():
    import mgpu_helpers as mh

    res = mh.run_ranks(mh.lessons.lab.compare_rank, 3, args=(3000,), backend="gloo", stream=False, quiet=True)
    assert all(v["same"] and v["max_diff"] < 1e-5 for v in res.values)
    assert all(v["peak_bytes"] is None for v in res.values)  # no CUDA allocator on the CPU
    mib = 1 << 20
    assert sweep.buffer_bytes(mib, 4) == {
        "all_reduce": mib,
        "rs_ag_out_of_place": mib + mib // 4,
        "rs_ag_in_place": mib,
        "reduce_scatter_only": mib // 4,
    }

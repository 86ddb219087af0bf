"""The lab report: a Markdown file with its tables, and the figures as PNG files next to it."""
import os

import matplotlib

matplotlib.use("Agg")

import pytest

from mgpu_helpers.lessons import lab
from mgpu_helpers.measure import sweep
from mgpu_helpers.widgets import bandwidth, rank_distribution, topology as topo_widget


def _rows():
    return [sweep.SweepRow("all_reduce", n, t, n / t / 1e3, n / t / 1e3, 2, "gloo", 5)
            for n, t in ((1024, 100.0), (32768, 200.0), (1 << 20, 900.0))]


def test_report_is_written_with_its_table_and_images(tmp_path):
    rows = _rows()
    steps = [{"nbytes": r.nbytes, "compute_us": 500.0, "wait_us": 50.0, "comm_us": r.time_us,
              "efficiency": 500 / (550 + r.time_us), "limited_by": "compute"} for r in rows]
    report = lab.LabReport("All-Reduce lab")
    report.add_text("Setup", "2 ranks, gloo")
    report.add_table("Sweep", [dict(d, size=sweep.format_bytes(d["nbytes"]))
                               for d in sweep.compare_with_reference(rows)], lab.SWEEP_COLUMNS)
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
    text = lab.markdown_table([{"a": "x|y", "b": None}], [("a", "A", "{}"), ("b", "B", "{:.1f}")])
    assert text.splitlines()[-1] == "| x\\|y | - |"


def test_figure_names_must_be_safe_file_names():
    with pytest.raises(ValueError, match="figure name"):
        lab.LabReport("t").add_figure("x", "../evil", None)


def test_topology_matrix_draws_nvml_words_and_rejects_others():
    fig = topo_widget.draw_link_matrix([["X", "NV18"], ["NV18", "X"]], note="recorded")
    assert fig.axes[0].get_title() == "GPU topology"
    assert topo_widget.link_class("NV4") == "NVLink" and topo_widget.link_class("SYS").startswith("across")
    with pytest.raises(ValueError, match="link word"):
        topo_widget.link_class("FAST")
    with pytest.raises(ValueError, match="square"):
        topo_widget.draw_link_matrix([["X", "NV1"]])


def test_rank_distribution_draws_one_box_per_rank_and_phase():
    per_phase = {"compute": [[0.01, 0.011], [0.03, 0.031]], "wait": [[0.02, 0.021], [0.0, 0.001]]}
    fig = rank_distribution.draw_rank_distribution(per_phase, highlight=1)
    assert [ax.get_title() for ax in fig.axes] == ["compute", "wait"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["rank 0", "rank 1 *"]


def test_lab_report_from_the_lab_results_has_every_section(tmp_path):
    rows = _rows() + [sweep.SweepRow("rs_ag", n, t * 1.5, 1.0, 1.0, 2, "gloo", 5)
                      for n, t in ((1024, 100.0), (32768, 200.0), (1 << 20, 900.0))]
    steps = [{"nbytes": n, "compute_us": 500.0, "wait_us": w, "comm_us": c, "step_us": 500.0 + w + c,
              "efficiency": 500.0 / (500.0 + w + c), "limited_by": "compute"}
             for n, w, c in ((1024, 10.0, 100.0), (32768, 300.0, 200.0), (1 << 20, 10.0, 900.0))]
    owners = [{"rank": r, "device": "cpu", "shard": (8 * r, 8 * r + 8), "input": list(range(8 * r, 8 * r + 8)),
               "local": 1.0, "result": 1240.0, "expected": 1240.0, "ok": True} for r in range(2)]
    conclusions = lab.conclude(steps, rows, 2)
    assert any("1 MiB" in c and "All-Reduce 比局部计算还长" in c for c in conclusions)
    assert any("等待" in c and "32 KiB" in c for c in conclusions)
    assert any("1.50 倍" in c for c in conclusions)
    compare = {"rows": [{"approach": "all_reduce", "result": "sum", "buffer": "1 MiB", "time": "1 us"}], "note": "n"}
    report = lab.build_report("Lab", "setup", "GPU0 GPU1", owners, rows, steps, compare, conclusions,
                              {"busbw": ("busbw", bandwidth.draw_busbw(rows))})
    path = report.write(str(tmp_path))
    text = open(path, encoding="utf-8").read()
    for heading in ("## 环境", "## 拓扑摘要", "## 逐 Rank 输出", "## 一步的时间拆分", "## 结论"):
        assert heading in text
    assert "| 1 | cpu | (8, 16) | 8 9 10 11 12 13 14 15 | 1 | 1240 | yes |" in text
    assert os.path.exists(tmp_path / "busbw.png")


def test_ownership_check_gives_every_rank_the_global_result():
    import mgpu_helpers as mh
    res = mh.run_ranks(lab.ownership_check, 3, args=(10,), backend="gloo", stream=False, quiet=True)
    assert [v["shard"] for v in res.values] == [(0, 4), (4, 7), (7, 10)]
    assert all(v["ok"] and v["result"] == 285.0 for v in res.values)


def test_rs_ag_matches_all_reduce_and_needs_a_shard_more_memory():
    import mgpu_helpers as mh
    res = mh.run_ranks(sweep.compare_rank, 2, args=(1 << 16,), backend="gloo", stream=False, quiet=True)
    assert all(v["same"] for v in res.values)
    assert sweep.buffer_bytes(1 << 20, 4) == {"all_reduce": 1 << 20, "rs_ag": (1 << 20) + (1 << 18),
                                              "reduce_scatter_only": 1 << 18}


def test_text_progress_bar_reaches_the_total(capsys, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_widgets(name, *a, **k):
        if name == "ipywidgets":
            raise ImportError(name)
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_widgets)
    update = lab.progress_bar("x")
    for i in range(4):
        update(i, 3)
    assert capsys.readouterr().out.rstrip().endswith("3/3")

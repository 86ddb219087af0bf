"""Diagnostics: hung collectives are located per rank by torch's flight recorder, torch's debug mode names the
mismatch, the analyzer and the dumps name the rank that parted."""

import pytest

import mgpu_helpers as mh
from mgpu_helpers.measure import diagnose as dg


def test_mismatched_order_times_out_with_each_rank_in_a_different_collective():
    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(mh.lessons.diagnostics.mismatched_order, 2, timeout=3, stream=False, quiet=True)
    exc = info.value
    assert exc.waiting_in[0].startswith("dist.all_reduce")
    assert exc.waiting_in[1].startswith("dist.broadcast")
    assert exc.collectives == {
        0: {"last_completed": (1, "all_reduce"), "stuck_in": (2, "all_reduce")},
        1: {"last_completed": (1, "all_reduce"), "stuck_in": (2, "broadcast")},
    }


def test_the_skipped_collective_is_named_by_the_dumps_and_by_torchs_analyzer(tmp_path, monkeypatch):
    # notebook 10's hang: the last of 3 ranks skips the third all-reduce, so its #3 is the broadcast. The dumps are
    # kept in a folder of this test's own: hangs of tests running beside it would clear the shared one's oldest.
    monkeypatch.setenv("MGPU_FLIGHT_DIR", str(tmp_path))
    import os
    import pickle
    import re
    import subprocess
    import sys

    from mgpu_helpers.checks import diagnostics
    from mgpu_helpers.launcher import flight

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(mh.lessons.diagnostics.skipped_collective, 3, timeout=3, stream=False, quiet=True)
    folder = info.value.flight_dumps
    dumps = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            dumps[int(name.rsplit("_", 1)[1])] = pickle.load(f)
    assert diagnostics.reference_culprit(dumps) == (2, 3, "name")
    fr = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", flight.analyzer_input(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = fr.stdout + fr.stderr
    assert "Collective sequence number: 3 has errors" in said and "Culprit rank 2" in said
    # Under torch 2.11 the analyzer gets a copy with gloo's records named as NCCL's: the verdict is the same.
    copy = flight.analyzer_input(folder, "2.11.0+cu130")
    assert copy != folder
    on_copy = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", copy],
        capture_output=True,
        text=True,
        timeout=120,
    )
    verdict = re.compile(r"^(?:Collective sequence number|error msg).*$", re.M)
    assert verdict.findall(on_copy.stdout + on_copy.stderr) == verdict.findall(said) != []


def test_debug_mode_names_the_mismatched_collectives():
    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(mh.lessons.diagnostics.mismatched_order, 2, timeout=20, debug=True, stream=False, quiet=True)
    text = str(info.value)
    assert not isinstance(info.value, mh.RankTimeout)
    assert "Detected mismatch between collectives" in text
    assert "SequenceNumber=1" in text and "ALLREDUCE" in text and "BROADCAST" in text


def test_debug_mode_names_a_count_mismatch():
    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(mh.lessons.diagnostics.mismatched_count, 2, timeout=20, debug=True, stream=False, quiet=True)
    assert "Tensor shapes: 5vs 4" in str(info.value) or "Tensor shapes: 4vs 5" in str(info.value)


def test_matched_collectives_complete():
    res = mh.run_ranks(mh.lessons.diagnostics.matched, 3, stream=False, quiet=True)
    assert [v["value"] for v in res.values] == [9.0, 9.0, 9.0]  # 1 -> 3 -> 9 -> broadcast 9


def test_comm_fraction_is_the_slowest_ranks_share_of_its_step_in_the_all_reduce():
    values = [dict(compute_s=0.1, comm_s=0.3, step_s=0.4), dict(compute_s=0.4, comm_s=0.1, step_s=0.5)]
    assert dg.comm_fraction(values) == pytest.approx(0.2)  # rank 1 is the slowest: 0.1 of 0.5


def test_comm_bound_probe_spends_most_of_its_step_in_the_all_reduce():
    # No compute at all (0 units: not a single matmul) against an 8 MiB all-reduce: the step is the
    # all-reduce by construction, on any machine. The margin is measured in the same run: whatever the
    # empty compute phase took (a stall of a loaded machine included) stays below the all-reduce.
    from mgpu_helpers.measure import workloads

    res = mh.run_ranks(workloads.scaling_step, 2, args=(0, 1 << 21, 5), backend="gloo", stream=False, quiet=True)
    slowest = max(res.values, key=lambda v: v["step_s"])
    assert slowest["comm_s"] > slowest["compute_s"], res.values
    assert dg.comm_fraction(res.values) > 0.5


def test_per_rank_phase_times_keep_every_rank_apart():
    values = [
        {"compute_s": [1, 2], "wait_s": [3, 4], "comm_s": [5, 6]},
        {"compute_s": [7, 8], "wait_s": [0, 0], "comm_s": [5, 5]},
    ]
    t = dg.per_rank_phase_times(values)
    assert t["compute"] == [[1, 2], [7, 8]] and dg.medians(t["wait"]) == [3.5, 0]


def test_nccl_debug_lines_need_nccl_ranks():
    from mgpu_helpers import hardware

    if hardware.machine().gpu_count < 2:
        assert dg.nccl_debug_lines(2) == []  # nothing to run: no NCCL without 2 GPUs
    else:
        assert any("NCCL INFO" in ln for ln in dg.nccl_debug_lines(2))


def test_run_schedule_stops_where_the_schedules_part():
    schedules = [
        ["all_reduce", "broadcast", "all_reduce", "broadcast"],
        ["all_reduce", "broadcast", "broadcast", "all_reduce"],
        ["all_reduce", "broadcast", "broadcast", "all_reduce"],
    ]
    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(dg.run_schedule, 3, args=(schedules,), timeout=3, stream=False, quiet=True)
    # the recorder counts from 1: the schedules' position 2 is its #3
    assert info.value.collectives == {
        r: {"last_completed": (2, "broadcast"), "stuck_in": (3, op)}
        for r, op in enumerate(("all_reduce", "broadcast", "broadcast"))
    }
    every_kind = [["all_reduce", "broadcast", "barrier", "all_gather_into_tensor", "reduce_scatter_tensor"]] * 2
    assert mh.run_ranks(dg.run_schedule, 2, args=(every_kind,), stream=False, quiet=True).values == [5, 5]
    with pytest.raises(mh.RankError, match="unknown collective 'gather'"):
        mh.run_ranks(dg.run_schedule, 2, args=([["gather"], ["gather"]],), stream=False, quiet=True)


def test_the_hang_scenarios_are_the_ones_notebook_10_teaches():
    import mgpu_helpers.lessons.diagnostics as lesson

    with open(lesson.__file__, encoding="utf-8") as f:
        assert f.readline().startswith("# Generated from solutions/10_diagnostics.ipynb")
    assert not hasattr(dg, "mismatched_order")  # one copy: the notebook's

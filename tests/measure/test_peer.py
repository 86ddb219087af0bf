"""Peer access and paths: what runs without GPUs (matrix format, env plumbing on gloo ranks, recorded figures)."""

from __future__ import annotations

import os

import pytest

from mgpu_helpers.measure import peer

GPUS = peer.gpu_count()


def test_the_matrix_prints_like_nvidia_smi_topo_p2p():
    text = peer.format_matrix([[None, True], [False, None]])
    assert text.splitlines()[1].split() == ["GPU0", "X", "OK"]
    assert text.splitlines()[2].split() == ["GPU1", "NS", "X"]
    assert peer.format_matrix([]) == "(no GPUs)"


def test_the_matrix_has_one_row_per_gpu_and_none_on_the_diagonal():
    m = peer.peer_matrix()
    assert len(m) == GPUS and all(len(row) == GPUS and row[i] is None for i, row in enumerate(m))


def test_cpu_work_is_timed_by_the_wall_clock_and_copies_in_gbps():
    import time

    from mgpu_helpers.measure import timing

    assert timing.elapsed_s(lambda: time.sleep(0.01), None) >= 0.01
    assert timing.bandwidth_gbps(2 * 10**9, 0.5) == 4.0
    assert peer.host_copy_GBps(1 << 20, repeats=2) > 0


@pytest.mark.skipif(GPUS >= 2, reason="the below-2-GPUs path")
def test_below_two_gpus_the_gpu_measurements_skip_saying_why():
    with pytest.raises(peer.NeedsGpus, match="needs 2 NVIDIA GPUs"):
        peer.peer_copy()
    out = peer.measure_all()
    assert out["copy"] is None and out["busbw"] is None and len(out["skipped"]) == 2
    text = peer.format_report(out)
    assert "skipped: a peer copy needs 2 NVIDIA GPUs" in text and "329.58" in text  # nccl-tests 1 GiB, in place


def _p2p_setting(rank, world_size):
    import os as _os

    return _os.environ.get("NCCL_P2P_DISABLE")


def test_each_launch_gives_only_its_ranks_the_p2p_setting():
    from mgpu_helpers.launcher.launch import run_ranks

    before = os.environ.get("NCCL_P2P_DISABLE")
    on = run_ranks(_p2p_setting, 2, backend="gloo", env=peer.rank_env(True), stream=False, quiet=True)
    off = run_ranks(_p2p_setting, 2, backend="gloo", env=peer.rank_env(False), stream=False, quiet=True)
    assert on.values == ["0", "0"] and off.values == ["1", "1"]
    assert os.environ.get("NCCL_P2P_DISABLE") == before  # the caller's environment is untouched


def test_the_comparison_runs_both_launches_on_gloo_ranks():
    rows = peer.compare_p2p(2, sizes=(1 << 12, 1 << 16), backend="gloo", timeout=120)
    assert [r["nbytes"] for r in rows] == [1 << 12, 1 << 16]
    assert all(r["busbw_default"] > 0 and r["busbw_p2p_off"] > 0 and r["backend"] == "gloo" for r in rows)
    assert all(r["ratio"] == pytest.approx(r["busbw_p2p_off"] / r["busbw_default"]) for r in rows)


def test_the_recorded_h200_figures_name_their_source():
    rec = peer.recorded()
    assert "2 x NVIDIA H200" in rec["_source"] and rec["peer_access"] == [[None, True], [True, None]]
    assert rec["peer_copy_GBps"]["0->1"] == 394.4
    assert rec["nvlink_GBps_per_gpu"] == pytest.approx(18 * 26.562)
    assert rec["allreduce_busbw_default_GBps"][1 << 30] == 329.58  # nccl-tests, in place


def test_the_bench_entry_prints_the_report(capsys):
    from mgpu_helpers.bench import peer as bench_peer

    if GPUS >= 2:
        pytest.skip("on GPUs the bench measures for real (run it by hand)")
    assert bench_peer.main([]) == 0
    out = capsys.readouterr().out
    assert "peer access" in out and "skipped:" in out and "394.4" in out


def test_host_copy_is_measured_and_p2p_effect_says_it_needs_two_gpus():
    import pytest as _pytest

    from mgpu_helpers.measure import peer as _peer

    assert _peer.host_copy_GBps(1 << 20, repeats=2) > 0
    if _peer.gpu_count() < 2:
        with _pytest.raises(_peer.NeedsGpus, match="needs 2 NVIDIA GPUs"):
            _peer.p2p_effect(2, 1 << 20)

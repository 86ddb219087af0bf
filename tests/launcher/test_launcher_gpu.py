"""The launcher on real GPUs with NCCL: the same rank functions as on the CPU (skipped without 2 GPUs)."""

from __future__ import annotations

import time

import pytest

import mgpu_helpers as mh

GPUS = mh.hardware.machine().gpu_count
N = min(2, GPUS)  # ranks for the tests that also mean something on one GPU
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs an NVIDIA GPU")
needs_two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 NVIDIA GPUs")


def _allreduce_on_own_gpu(rank, world_size):
    import torch
    import torch.distributed as dist

    device = mh.rank_device()
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t)
    return device.type, device.index, float(t.item())


@needs_gpu
def test_nccl_all_reduce_on_one_gpu_per_rank():
    res = mh.run_ranks(_allreduce_on_own_gpu, N, backend="nccl", quiet=True)
    assert res.backend == "nccl"
    assert res.values == [("cuda", r, float(N * (N - 1) // 2)) for r in range(N)]


@needs_gpu
def test_auto_picks_nccl_when_there_is_a_gpu_per_rank():
    assert mh.run_ranks(_allreduce_on_own_gpu, N, quiet=True).backend == "nccl"


@needs_gpu
def test_cpu_tensors_still_work_under_nccl():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.tensor([rank + 1])  # a CPU tensor: carried by the gloo side of the group
        dist.all_reduce(t)
        return int(t.item())

    assert mh.run_ranks(rank_fn, N, backend="nccl", quiet=True).values == [N * (N + 1) // 2] * N


@needs_gpu
def test_cuda_used_in_notebook_first_still_launches():
    import torch

    torch.zeros(1, device="cuda").sum().item()  # this process now holds a CUDA context
    res = mh.run_ranks(_allreduce_on_own_gpu, N, backend="nccl", quiet=True)
    assert [v[2] for v in res.values] == [float(N * (N - 1) // 2)] * N


@needs_two_gpus
def test_nccl_rank_exception_kills_peers():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.ones(1, device=mh.rank_device()))
        if rank == 1:
            raise ValueError("rank 1 gives up")
        time.sleep(60)

    t0 = time.monotonic()
    with pytest.raises(mh.RankError) as info:
        mh.run_ranks(rank_fn, 2, backend="nccl", timeout=50, quiet=True)
    assert time.monotonic() - t0 < 20
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"


@needs_two_gpus
def test_nccl_hung_collective_diagnosed_at_timeout():
    def rank_fn(rank, world_size):
        import torch
        import torch.distributed as dist

        t = torch.ones(1 << 20, device=mh.rank_device())
        dist.all_reduce(t)
        if rank == 0:
            dist.all_reduce(t)  # rank 1 never joins this one
        torch.cuda.synchronize()
        if rank == 1:
            time.sleep(120)

    with pytest.raises(mh.RankTimeout) as info:
        mh.run_ranks(rank_fn, 2, backend="nccl", timeout=10, quiet=True)
    assert set(info.value.stacks) == {0, 1}
    assert "synchronize" in info.value.stacks[0] or "all_reduce" in info.value.stacks[0]
    # torch's flight recorder: both ranks completed all-reduce #1; rank 0 is stuck in #2, rank 1 in none.
    fr = info.value.collectives
    assert fr[0] == {"last_completed": (1, "all_reduce"), "stuck_in": (2, "all_reduce")}, fr
    assert fr[1]["last_completed"] == (1, "all_reduce"), fr
    assert "flight recorder: last completed #1 all_reduce, stuck in #2 all_reduce" in str(info.value)

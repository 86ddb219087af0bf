"""The hand-written ring all-reduce gives what dist.all_reduce gives, on fresh random inputs, for 2..8 ranks."""

import random

import pytest

import mgpu_helpers as mh
from mgpu_helpers.lessons.ring import chunk_bounds, ring_schedule
from mgpu_helpers.models.comm_share import comm_share_speedup


def _ring_vs_dist(rank, world_size, lengths, seed):
    import torch
    import torch.distributed as dist

    from mgpu_helpers import rank_device
    from mgpu_helpers.lessons.ring import ring_all_reduce, ring_all_reduce_steps

    dev = rank_device()  # cuda:k under NCCL, so that the ring really runs through NCCL there
    report = []
    for i, length in enumerate(lengths):
        g = torch.Generator().manual_seed(seed + 1000 * i + rank)
        for dtype in (torch.float64, torch.int64):
            if dtype.is_floating_point:
                x = torch.randn(length, generator=g, dtype=dtype)
            else:
                x = torch.randint(-1000, 1000, (length,), generator=g, dtype=dtype)
            x = x.to(dev)
            for op, dop in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
                ref = x.clone()
                dist.all_reduce(ref, op=dop)
                got = x.clone()
                ring_all_reduce(got, op=op, pieces=1 + i % 3)
                exact = not dtype.is_floating_point or op == "max"
                ok = torch.equal(got, ref) if exact else torch.allclose(got, ref, rtol=1e-12, atol=1e-12)
                report.append((length, str(dtype), op, bool(ok)))
    # The recording variant ends with the same tensor, and its last step holds the reduced result.
    x = torch.full((2 * world_size + 1,), float(2**rank), dtype=torch.float64, device=dev)
    steps = ring_all_reduce_steps(x.clone())
    report.append(("steps", len(steps), bool(torch.equal(steps[-1][-1], torch.full_like(x, 2.0**world_size - 1)))))
    return report


@pytest.mark.parametrize("world_size", range(2, 9))
def test_ring_all_reduce_matches_dist_all_reduce(world_size):
    seed = random.randrange(1 << 30)
    # Lengths not divisible by world_size, shorter than it (empty chunks), and a single element.
    lengths = [1, world_size - 1, 3 * world_size + 2, 1001]
    res = mh.run_ranks(
        _ring_vs_dist, world_size, args=(lengths, seed), backend="gloo", timeout=60, stream=False, quiet=True
    )
    for rank, report in enumerate(res.values):
        bad = [r for r in report[:-1] if not r[-1]]
        assert not bad, f"rank {rank}, seed {seed}: ring != dist.all_reduce for {bad}"
        assert report[-1] == ("steps", 1 + 2 * (world_size - 1), True), report[-1]


def test_chunk_bounds_cover_every_element_once():
    for length in range(30):
        for n in range(1, 9):
            b = chunk_bounds(length, n)
            assert len(b) == n and b[0][0] == 0 and b[-1][1] == length
            assert all(b[i][1] == b[i + 1][0] for i in range(n - 1))
            sizes = [hi - lo for lo, hi in b]
            assert max(sizes) - min(sizes) <= 1


def test_ring_schedule_sends_what_the_neighbour_receives():
    for n in range(2, 9):
        plan = ring_schedule(n)
        assert len(plan) == 2 * (n - 1)
        for _phase, _step, who in plan:
            for r in range(n):
                assert who[r][0] == who[(r + 1) % n][1]  # r sends chunk c, r + 1 receives chunk c
        # After reduce-scatter rank r holds chunk r + 1, the first one it sends in all-gather.
        last_rs = plan[n - 2][2]
        first_ag = plan[n - 1][2]
        assert all(last_rs[r][1] == (r + 1) % n == first_ag[r][0] for r in range(n))


def test_comm_share_speedup_of_the_30_to_10_percent_story():
    assert comm_share_speedup(0.3, 0.1) == pytest.approx(0.9 / 0.7)
    assert comm_share_speedup(0.2, 0.2) == 1.0
    with pytest.raises(ValueError, match="share of the step"):
        comm_share_speedup(1.0, 0.1)


def test_ring_bench_parses_sizes_and_reports_both_columns():
    from mgpu_helpers.bench import ring as ring_bench
    from mgpu_helpers.report.sizes import parse_size

    assert ring_bench.parse_size is parse_size  # one grammar for sizes, nccl-tests' binary units
    assert ring_bench.parse_size("4K") == 4096
    assert ring_bench.parse_size("256M") == 256 << 20
    assert ring_bench.parse_size("1GiB") == 1 << 30
    assert ring_bench.parse_size("1000") == 1000
    backend, rows = ring_bench.measure(2, sizes=[4096, 10_000], iters=2, warmup=1, pieces=(1, 2), backend="gloo")
    assert backend == "gloo" and [r[0] for r in rows] == [4096, 10_000]
    assert all(ok for *_x, ok in rows), "ring and dist.all_reduce disagree"
    assert all(set(t_ring) == {1, 2} and t_dist > 0 for _n, t_dist, t_ring, _ok in rows)
    table = ring_bench.format_table(2, rows)
    assert len(table.splitlines()) == 2 + 2 * 2 and "ring/dist" in table  # header, rule, a row per (size, pieces)


def _avg_rank(rank, world_size):
    import torch
    import torch.distributed as dist

    from mgpu_helpers.lessons.ring import all_reduce_avg, portable_op

    floats = all_reduce_avg(torch.tensor([float(rank), 2.0 * rank]))
    ints = all_reduce_avg(torch.tensor([rank, 3 * rank]))  # integers floor-divide, as NCCL's AVG keeps them
    chosen = portable_op("avg", torch.zeros(1))
    return floats, ints, (chosen[0] == dist.ReduceOp.SUM, chosen[1])


def test_all_reduce_avg_on_cpu_tensors_is_sum_then_divide():
    res = mh.run_ranks(_avg_rank, 4, backend="gloo", stream=False, quiet=True)
    assert [f.tolist() for f, _i, _c in res.values] == [[1.5, 3.0]] * 4
    assert [i.tolist() for _f, i, _c in res.values] == [[1, 4]] * 4  # 6 // 4, 18 // 4
    assert all(c == (True, True) for _f, _i, c in res.values)


def _avg_ring_rank(rank, world_size):
    import torch

    from mgpu_helpers.lessons.ring import ring_all_reduce

    return ring_all_reduce(torch.tensor([float(rank), 1.0]), op="avg").tolist()


def test_ring_all_reduce_avg_and_bad_input_say_what_to_do():
    res = mh.run_ranks(_avg_ring_rank, 3, backend="gloo", stream=False, quiet=True)
    assert res.values == [[1.0, 1.0]] * 3
    from mgpu_helpers.lessons.ring import reduce_into

    with pytest.raises(ValueError, match="op must be one of"):
        reduce_into("mean")


def _gpu_count() -> int:
    from mgpu_helpers import hardware

    return hardware.machine().gpu_count


needs_2_gpus = pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs (NCCL)")


@needs_2_gpus
def test_ring_all_reduce_matches_nccl_all_reduce_on_gpus():
    world_size = min(_gpu_count(), 8)
    seed = random.randrange(1 << 30)
    lengths = [1, world_size - 1, 3 * world_size + 2, 1 << 20]
    res = mh.run_ranks(
        _ring_vs_dist, world_size, args=(lengths, seed), backend="nccl", timeout=120, stream=False, quiet=True
    )
    for rank, report in enumerate(res.values):
        bad = [r for r in report[:-1] if not r[-1]]
        assert not bad, f"rank {rank}, seed {seed}: ring != dist.all_reduce under NCCL for {bad}"


@needs_2_gpus
def test_ring_reaches_80_percent_of_nccl_busbw_at_256_mib_on_2_gpus():
    # Three rounds, each timing dist.all_reduce and the ring back to back. The margin comes from the same
    # run: how much dist.all_reduce itself varied between rounds (a GPU shared with another job, clocks),
    # so a noisy machine widens the allowance instead of failing the check.
    import statistics

    from mgpu_helpers.bench import ring as ring_bench

    rounds = [ring_bench.measure(2, sizes=[256 << 20], iters=20, pieces=(1, 2), backend="nccl")[1][0] for _ in range(3)]
    assert all(ok for *_x, ok in rounds)
    t_dist = [r[1] for r in rounds]
    t_ring = [min(r[2].values()) for r in rounds]
    print(ring_bench.format_table(2, [rounds[-1][:4]]))
    noise = (max(t_dist) - min(t_dist)) / statistics.median(t_dist)
    share = statistics.median(t_dist) / statistics.median(t_ring)
    assert share >= 0.8 - noise, f"ring busbw is {share:.0%} of dist.all_reduce's at 256 MiB (noise {noise:.0%})"


def _avg_cuda_under_gloo(rank, world_size):
    import torch
    import torch.distributed as dist

    from mgpu_helpers.lessons.ring import all_reduce_avg, portable_op

    chosen = portable_op("avg", torch.zeros(1, device="cuda:0"))
    ints = all_reduce_avg(torch.tensor([rank + 3], device="cuda:0"))  # gloo refuses AVG on integers
    return chosen[0] == dist.ReduceOp.SUM and chosen[1], ints.tolist()


@pytest.mark.skipif(_gpu_count() < 1, reason="needs a GPU (CUDA tensors in a gloo group)")
def test_avg_of_cuda_tensors_in_a_gloo_group_is_sum_then_divide():
    res = mh.run_ranks(_avg_cuda_under_gloo, 2, backend="gloo", stream=False, quiet=True)
    assert res.values == [(True, [3]), (True, [3])]  # (3 + 4) // 2

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgpu_helpers.models import perfmodel as pm

costs_lists = st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=0, max_size=60)
world_sizes = st.integers(min_value=1, max_value=9)
methods = st.sampled_from(["lpt", "contiguous"])


# ---- shard function: properties -------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(costs_lists, world_sizes, methods)
def test_balanced_shards_cover_every_item_exactly_once(costs, n, method):
    shards = pm.balanced_shards(costs, n, method)
    assert len(shards) == n
    flat = [i for s in shards for i in s]
    assert sorted(flat) == list(range(len(costs)))


@settings(max_examples=200, deadline=None)
@given(costs_lists, world_sizes, methods)
def test_balanced_shards_are_reproducible(costs, n, method):
    assert pm.balanced_shards(costs, n, method) == pm.balanced_shards(list(costs), n, method)


@settings(max_examples=200, deadline=None)
@given(costs_lists, world_sizes, methods)
def test_balanced_shards_max_load_within_one_item_of_the_mean(costs, n, method):
    loads = pm.shard_loads(costs, pm.balanced_shards(costs, n, method))
    bound = sum(costs) / n + (max(costs) if costs else 0)
    assert max(loads) <= bound + 1e-6 * (1 + bound)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=100), max_size=40), world_sizes)
def test_contiguous_shards_keep_item_order(costs, n):
    flat = [i for s in pm.balanced_shards(costs, n, "contiguous") for i in s]
    assert flat == list(range(len(costs)))


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=200), world_sizes)
def test_shard_without_costs_gives_disjoint_equal_count_slices(n_items, n):
    items = list(range(100, 100 + n_items))
    pieces = [pm.shard(items, r, n) for r in range(n)]
    assert [x for p in pieces for x in p] == items
    assert max(map(len, pieces)) - min(map(len, pieces)) <= 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=0.1, max_value=50), min_size=1, max_size=30), world_sizes)
def test_shard_with_costs_partitions_the_items(costs, n):
    items = [f"item{i}" for i in range(len(costs))]
    pieces = [pm.shard(items, r, n, costs=costs) for r in range(n)]
    assert sorted(x for p in pieces for x in p) == sorted(items)


def test_lpt_balances_the_seed_straggler_shards():
    # The seed's 12/6/4/2 GB shards came from uneven ownership; split as 24 x 1 GB items they balance to 6 each.
    shards = pm.balanced_shards([1.0] * 24, 4)
    assert pm.shard_loads([1.0] * 24, shards) == [6.0] * 4
    # Items of unequal cost: LPT gives the biggest to separate ranks.
    shards = pm.balanced_shards([12, 6, 4, 2, 5, 5, 3, 1], 4)
    assert max(pm.shard_loads([12, 6, 4, 2, 5, 5, 3, 1], shards)) == 12


def test_shard_rejects_bad_rank_and_cost_count():
    with pytest.raises(ValueError, match="rank"):
        pm.shard([1, 2], 2, 2)
    with pytest.raises(ValueError, match="one cost per item"):
        pm.shard([1, 2], 0, 2, costs=[1])


# ---- memory per rank by strategy: the seed's cases ---------------------------------------------------------

def test_replicated_24gb_model_fails_on_four_16gb_gpus():
    plan = pm.memory_plan("replicate", n=4, capacity=16, params=24)
    assert plan.totals == [24] * 4
    assert not plan.fits
    assert sum(plan.totals) > 64 and plan.replicated == ("params",)


def test_data_parallel_does_not_shrink_a_model_bigger_than_one_gpu():
    plan = pm.memory_plan("data_parallel", n=8, capacity=16, params=20, activations=8)
    assert all(r.params == 20 for r in plan.ranks)
    assert not plan.fits
    assert plan.ranks[0].activations == pytest.approx(1.0)


def test_sharding_the_24gb_state_fits_and_12_12_is_balanced():
    uneven = pm.memory_plan("zero3", n=2, capacity=16, params=24, weights=(14, 10))
    even = pm.memory_plan("zero3", n=2, capacity=16, params=24, weights=(12, 12))
    assert uneven.totals == pytest.approx([14, 10]) and even.totals == pytest.approx([12, 12])
    assert uneven.fits and even.fits
    assert even.imbalance == pytest.approx(1.0)
    assert uneven.imbalance == pytest.approx(14 / 12)
    assert even.replicated == ()


def test_zero_stages_shard_more_state_each_stage():
    kw = dict(n=4, capacity=80, params=8, grads=8, optimizer=32, activations=16)
    totals = [pm.memory_plan(s, **kw).totals[0] for s in ("data_parallel", "zero1", "zero2", "zero3")]
    assert totals == [8 + 8 + 32 + 4, 8 + 8 + 8 + 4, 8 + 2 + 8 + 4, 2 + 2 + 8 + 4]


def test_unified_memory_reports_oversubscription_instead_of_capacity():
    plan = pm.memory_plan("unified_memory", n=4, capacity=16, params=24)
    assert not plan.fits
    assert plan.oversubscribed == [8, 8, 8, 8]
    assert "host memory" in plan.note


def test_memory_plan_rejects_unknown_strategy_and_bad_weights():
    with pytest.raises(ValueError, match="unknown strategy"):
        pm.memory_plan("fsdp9", 2, 16, params=1)
    with pytest.raises(ValueError, match="weights"):
        pm.memory_plan("zero3", 2, 16, params=1, weights=(1,))


# ---- ring cost, bytes moved, speedup ------------------------------------------------------------------------

def test_ring_allreduce_is_reduce_scatter_plus_all_gather():
    b, n, a, beta = 1 << 30, 4, 10e-6, 1 / 300e9
    assert pm.ring_allreduce_seconds(b, n, a, beta) == pytest.approx(
        pm.ring_reduce_scatter_seconds(b, n, a, beta) + pm.ring_all_gather_seconds(b, n, a, beta))
    assert pm.ring_allreduce_seconds(b, n, a, beta) == pytest.approx(6 * a + 1.5 * b * beta)


def test_ring_cost_is_zero_for_one_rank_and_latency_grows_with_ranks():
    assert pm.ring_allreduce_seconds(1e9, 1, 1e-5, 1e-9) == 0
    small = [pm.ring_allreduce_seconds(8, n, 1e-5, 1e-9) for n in (2, 4, 8, 16)]
    assert small == sorted(small) and small[-1] > 7 * small[0]


def test_fit_alpha_beta_recovers_the_model_parameters():
    sizes = [1e3, 1e5, 1e6, 1e7, 1e8]
    times = [pm.ring_allreduce_seconds(b, 2, 37e-6, 1 / 330e9) for b in sizes]
    alpha, beta = pm.fit_alpha_beta("all_reduce", sizes, times, 2)
    assert alpha == pytest.approx(37e-6, rel=1e-6) and 1 / beta == pytest.approx(330e9, rel=1e-6)


def test_bytes_sent_per_rank_matches_busbw_definition():
    b, n = 1 << 20, 8
    assert pm.bytes_sent_per_rank("all_reduce", b, n) == pytest.approx(2 * 7 / 8 * b)
    assert pm.bytes_sent_per_rank("all_gather", b, n) == pytest.approx(7 / 8 * b)
    assert pm.bytes_sent_per_rank("reduce_scatter", b, n) == pytest.approx(7 / 8 * b)
    assert pm.bytes_sent_per_rank("all_reduce", b, 1) == 0
    # busbw is bytes sent per rank over time
    assert pm.busbw("all_reduce", b, 1e-3, n) == pytest.approx(pm.bytes_sent_per_rank("all_reduce", b, n) / 1e-3)


def test_reduce_scatter_leaves_one_nth_of_the_result_per_rank():
    rows = {r["op"]: r for r in pm.collective_table(4096, 4)}
    assert rows["reduce_scatter"]["result_on_rank0"] == 1024
    assert rows["all_reduce"]["result_on_other"] == 4096
    assert rows["reduce"]["result_on_other"] == 0 and rows["reduce"]["result_on_rank0"] == 4096


def test_seed_example_two_gpus_200ms_compute_50ms_comm_is_1_6x():
    t2 = pm.step_seconds(0.400, 2, comm_seconds=0.050)
    assert t2 == pytest.approx(0.250)
    assert pm.speedup(0.400, t2) == pytest.approx(1.6)
    assert pm.strong_scaling_efficiency(0.400, t2, 2) == pytest.approx(0.8)


def test_weak_scaling_efficiency_drops_with_communication():
    rows = pm.weak_scaling(0.1, [1, 2, 4, 8], 1e8, 20e-6, 1 / 100e9)
    eff = [r["efficiency"] for r in rows]
    assert eff[0] == 1.0 and eff == sorted(eff, reverse=True)


def test_a_fifth_gpu_can_make_a_small_job_slower():
    # Small local task, latency-bound all-reduce: n=4 -> 5 adds two ring steps but saves little compute.
    assert pm.slower_with_one_more(compute_seconds=2e-3, n=4, nbytes=4e6, alpha=100e-6, beta=1 / 20e9)
    # A big job still gains.
    assert not pm.slower_with_one_more(compute_seconds=2.0, n=4, nbytes=4e6, alpha=100e-6, beta=1 / 20e9)
    rows = pm.strong_scaling(2e-3, [1, 2, 3, 4, 5], 4e6, 100e-6, 1 / 20e9)
    assert rows[4]["step"] > rows[3]["step"]


def test_straggler_step_is_paced_by_biggest_shard():
    assert pm.straggler_step_seconds([12, 6, 4, 2], 0.01, 0.005) == pytest.approx(0.125)
    assert pm.straggler_step_seconds([6, 6, 6, 6], 0.01, 0.005) == pytest.approx(0.065)


def test_relative_fit_weights_small_messages_like_big_ones():
    sizes = [1e3, 1e4, 1e6, 1e8, 1e9]
    times = [pm.ring_allreduce_seconds(b, 2, 10e-6, 1 / 300e9) * (1.2 if b == 1e3 else 1.0) for b in sizes]
    a_abs, _ = pm.fit_alpha_beta("all_reduce", sizes, times, 2)
    a_rel, b_rel = pm.fit_alpha_beta("all_reduce", sizes, times, 2, relative=True)
    # the perturbed tiny message barely moves the absolute fit, but pulls the relative one
    assert a_rel > a_abs > 0 and 1 / b_rel == pytest.approx(300e9, rel=0.05)

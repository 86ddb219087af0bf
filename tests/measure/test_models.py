import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgpu_helpers.lessons import cost_model, sharding_rules
from mgpu_helpers.models import bandwidth, costs, memory, scaling

costs_lists = st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=0, max_size=60)
world_sizes = st.integers(min_value=1, max_value=9)


# ---- shard function: properties -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(costs_lists, world_sizes)
def test_assignments_cover_every_item_exactly_once(costs, n):
    shards = sharding_rules.assign_by_cost(costs, n)
    assert len(shards) == n
    flat = [i for s in shards for i in s]
    assert sorted(flat) == list(range(len(costs)))


@settings(max_examples=200, deadline=None)
@given(costs_lists, world_sizes)
def test_assignments_are_reproducible(costs, n):
    assert sharding_rules.assign_by_cost(costs, n) == sharding_rules.assign_by_cost(list(costs), n)


@settings(max_examples=200, deadline=None)
@given(costs_lists, world_sizes)
def test_assignments_max_load_within_one_item_of_the_mean(costs, n):
    loads = sharding_rules.assignment_loads(costs, sharding_rules.assign_by_cost(costs, n))
    bound = sum(costs) / n + (max(costs) if costs else 0)
    assert max(loads) <= bound + 1e-6 * (1 + bound)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=200), world_sizes)
def test_shard_without_costs_gives_disjoint_equal_count_slices(n_items, n):
    items = list(range(100, 100 + n_items))
    pieces = [sharding_rules.shard(items, r, n) for r in range(n)]
    assert [x for p in pieces for x in p] == items
    assert max(map(len, pieces)) - min(map(len, pieces)) <= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=200), world_sizes)
def test_contiguous_ranges_cover_the_indices_in_order_with_sizes_within_one(n_items, n):
    ranges = sharding_rules.contiguous_ranges(n_items, n)
    assert [i for r in ranges for i in r] == list(range(n_items))
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


def test_lpt_balances_the_seed_straggler_shards():
    # The seed's 12/6/4/2 GB shards came from uneven ownership; split as 24 x 1 GB items they balance to 6 each.
    shards = sharding_rules.assign_by_cost([1.0] * 24, 4)
    assert sharding_rules.assignment_loads([1.0] * 24, shards) == [6.0] * 4
    # Items of unequal cost: LPT gives the biggest to separate ranks.
    shards = sharding_rules.assign_by_cost([12, 6, 4, 2, 5, 5, 3, 1], 4)
    assert max(sharding_rules.assignment_loads([12, 6, 4, 2, 5, 5, 3, 1], shards)) == 12


def test_sharding_rules_reject_bad_input_saying_what_is_wrong():
    with pytest.raises(ValueError, match="rank"):
        sharding_rules.shard([1, 2], 2, 2)
    with pytest.raises(ValueError, match="world_size"):
        sharding_rules.contiguous_ranges(4, 0)
    with pytest.raises(ValueError, match="costs"):
        sharding_rules.assign_by_cost([1, -1], 2)


# ---- memory per rank by strategy: the seed's cases ---------------------------------------------------------


def test_replicated_24gb_model_fails_on_four_16gb_gpus():
    plan = memory.memory_plan("replicate", world_size=4, capacity=16, params=24)
    assert plan.totals == [24] * 4
    assert not plan.fits
    assert sum(plan.totals) > 64 and plan.replicated == ("params",)


def test_data_parallel_does_not_shrink_a_model_bigger_than_one_gpu():
    plan = memory.memory_plan("data_parallel", world_size=8, capacity=16, params=20, activations=8)
    assert all(r.params == 20 for r in plan.ranks)
    assert not plan.fits
    assert plan.ranks[0].activations == pytest.approx(1.0)


def test_sharding_the_24gb_state_fits_and_12_12_is_balanced():
    uneven = memory.memory_plan("zero3", world_size=2, capacity=16, params=24, weights=(14, 10))
    even = memory.memory_plan("zero3", world_size=2, capacity=16, params=24, weights=(12, 12))
    assert uneven.totals == pytest.approx([14, 10]) and even.totals == pytest.approx([12, 12])
    assert uneven.fits and even.fits
    assert even.imbalance == pytest.approx(1.0)
    assert uneven.imbalance == pytest.approx(14 / 12)
    assert even.replicated == ()


def test_zero_stages_shard_more_state_each_stage():
    kw = dict(world_size=4, capacity=80, params=8, grads=8, optimizer=32, activations=16)
    totals = [memory.memory_plan(s, **kw).totals[0] for s in ("data_parallel", "zero1", "zero2", "zero3")]
    assert totals == [8 + 8 + 32 + 4, 8 + 8 + 8 + 4, 8 + 2 + 8 + 4, 2 + 2 + 8 + 4]


def test_unified_memory_reports_oversubscription_instead_of_capacity():
    plan = memory.memory_plan("unified_memory", world_size=4, capacity=16, params=24)
    assert not plan.fits
    assert plan.oversubscribed == [8, 8, 8, 8]
    assert "host memory" in plan.note and "peer GPU" in plan.note


def test_memory_plan_rejects_unknown_strategy_and_bad_weights():
    with pytest.raises(ValueError, match="unknown strategy"):
        memory.memory_plan("fsdp9", 2, 16, params=1)
    with pytest.raises(ValueError, match="weights"):
        memory.memory_plan("zero3", 2, 16, params=1, weights=(1,))


# ---- ring cost, bytes moved, speedup ------------------------------------------------------------------------


def test_ring_allreduce_is_reduce_scatter_plus_all_gather():
    b, n, a, beta = 1 << 30, 4, 10e-6, 1 / 300e9
    assert cost_model.ring_allreduce_seconds(b, n, a, beta) == pytest.approx(
        cost_model.ring_reduce_scatter_seconds(b, n, a, beta) + cost_model.ring_all_gather_seconds(b, n, a, beta)
    )
    assert cost_model.ring_allreduce_seconds(b, n, a, beta) == pytest.approx(6 * a + 1.5 * b * beta)


def test_ring_cost_is_zero_for_one_rank_and_latency_grows_with_ranks():
    assert cost_model.ring_allreduce_seconds(1e9, 1, 1e-5, 1e-9) == 0
    small = [cost_model.ring_allreduce_seconds(8, n, 1e-5, 1e-9) for n in (2, 4, 8, 16)]
    assert small == sorted(small) and small[-1] > 7 * small[0]


def test_fit_alpha_beta_recovers_the_model_parameters():
    sizes = [1e3, 1e5, 1e6, 1e7, 1e8]
    times = [cost_model.ring_allreduce_seconds(b, 2, 37e-6, 1 / 330e9) for b in sizes]
    alpha, beta = costs.fit_alpha_beta(cost_model.ring_allreduce_seconds, sizes, times, 2)
    assert alpha == pytest.approx(37e-6, rel=1e-6) and 1 / beta == pytest.approx(330e9, rel=1e-6)


def test_bytes_sent_per_rank_matches_busbw_definition():
    b, n = 1 << 20, 8
    assert bandwidth.bytes_sent_per_rank("all_reduce", b, n) == pytest.approx(2 * 7 / 8 * b)
    assert bandwidth.bytes_sent_per_rank("all_gather", b, n) == pytest.approx(7 / 8 * b)
    assert bandwidth.bytes_sent_per_rank("reduce_scatter", b, n) == pytest.approx(7 / 8 * b)
    assert bandwidth.bytes_sent_per_rank("all_reduce", b, 1) == 0
    # busbw is bytes sent per rank over time
    assert bandwidth.busbw("all_reduce", b, 1e-3, n) == pytest.approx(
        bandwidth.bytes_sent_per_rank("all_reduce", b, n) / 1e-3
    )


def test_reduce_scatter_leaves_one_nth_of_the_result_per_rank():
    assert bandwidth.result_bytes_per_rank("reduce_scatter", 4096, 4, rank=0) == 1024
    assert bandwidth.result_bytes_per_rank("all_reduce", 4096, 4, rank=1) == 4096
    assert bandwidth.result_bytes_per_rank("reduce", 4096, 4, rank=1) == 0
    assert bandwidth.result_bytes_per_rank("reduce", 4096, 4, rank=0) == 4096


def test_seed_example_two_gpus_200ms_compute_50ms_comm_is_1_6x():
    t2 = cost_model.step_seconds(0.400, 2, comm_s=0.050)
    assert t2 == pytest.approx(0.250)
    assert scaling.speedup(0.400, t2) == pytest.approx(1.6)


def test_straggler_step_is_paced_by_biggest_shard():
    assert cost_model.straggler_step_seconds([12, 6, 4, 2], 0.01, 0.005) == pytest.approx(0.125)
    assert cost_model.straggler_step_seconds([6, 6, 6, 6], 0.01, 0.005) == pytest.approx(0.065)


def test_relative_fit_weights_small_messages_like_big_ones():
    sizes = [1e3, 1e4, 1e6, 1e8, 1e9]
    times = [cost_model.ring_allreduce_seconds(b, 2, 10e-6, 1 / 300e9) * (1.2 if b == 1e3 else 1.0) for b in sizes]
    a_abs, _ = costs.fit_alpha_beta(cost_model.ring_allreduce_seconds, sizes, times, 2)
    a_rel, b_rel = costs.fit_alpha_beta(cost_model.ring_allreduce_seconds, sizes, times, 2, relative=True)
    # the perturbed tiny message barely moves the absolute fit, but pulls the relative one
    assert a_rel > a_abs > 0 and 1 / b_rel == pytest.approx(300e9, rel=0.05)


def test_straggler_waits_are_the_gap_to_the_biggest_shard():
    assert cost_model.straggler_waits([12, 6, 4, 2], 0.01) == pytest.approx([0.0, 0.06, 0.08, 0.10])
    assert cost_model.straggler_waits([5, 5], 0.02) == [0.0, 0.0]


def test_ring_terms_are_the_multipliers_of_alpha_and_beta():
    b, w, a, beta = 1e6, 4, 2e-6, 1e-9
    assert costs.ring_terms(cost_model.ring_allreduce_seconds, b, w) == pytest.approx((6.0, 1.5 * b))
    with pytest.raises(ValueError):
        cost_model.ring_allreduce_seconds(b, 0, a, beta)

"""Hand-written data parallelism (notebook 09, exported to mh.lessons.data_parallel) must give the same weights
as one process on the whole batch, and as DDP; its stream edges and the NCCL-from-CuPy mapping hold."""

import pytest
import torch

import mgpu_helpers as mh
from mgpu_helpers.lessons import data_parallel as dp
from mgpu_helpers.measure import dp_reference as ref

GPUS = mh.hardware.machine().gpu_count


def test_shards_cover_the_dataset_without_overlap_and_stay_balanced():
    data = torch.arange(50)
    for ws in (1, 2, 3, 4, 7):
        parts = [dp.shard(data, r, ws) for r in range(ws)]
        assert torch.equal(torch.cat(parts), data)
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1
        assert [len(dp.shard(data, r, ws)) for r in range(ws)] == sizes  # repeatable


def test_shard_range_gives_the_extra_rows_to_the_first_ranks():
    assert [len(dp.shard_range(50, r, 4)) for r in range(4)] == [13, 13, 12, 12]
    assert [dp.shard_range(3, r, 5) for r in range(5)] == [range(1), range(1, 2), range(2, 3), range(3, 3), range(3, 3)]


def test_shard_of_a_tuple_cuts_every_tensor_alike():
    x, y = ref.make_dataset(ref.TrainConfig(n_samples=10))
    xs, ys = dp.shard((x, y), 1, 2)
    assert torch.equal(xs, x[5:]) and torch.equal(ys, y[5:])


def test_shard_rejects_a_rank_outside_the_world_and_an_empty_world():
    with pytest.raises(ValueError, match="rank must be"):
        dp.shard(torch.arange(4), 2, 2)
    with pytest.raises(ValueError, match="world_size >= 1"):
        dp.shard_range(4, 0, 0)


def _ours_and_ddp(rank, world_size, config):
    return {
        "ours": dp.train_data_parallel(rank, world_size, config),
        "ddp": ref.train_ddp(rank, world_size, config, dp.shard),
    }


@pytest.mark.parametrize("world_size", [2, 4])
def test_data_parallel_equals_single_process_and_ddp(world_size):
    cfg = ref.TrainConfig()
    reference = ref.train_single_process(cfg)
    res = mh.run_ranks(_ours_and_ddp, world_size, args=(cfg,), backend="gloo", timeout=90, stream=False, quiet=True)
    ours = [v["ours"] for v in res.values]
    for r in range(world_size):
        assert torch.allclose(ours[r]["params"], reference, rtol=1e-10, atol=1e-12)
        assert torch.allclose(res.values[r]["ddp"]["params"], reference, rtol=1e-10, atol=1e-12)
    # the model really moved, so the equality is not the trivial one of untrained weights
    start = ref.flat_params(ref.make_model(cfg))
    assert ref.max_difference(reference, start) > 1e-3
    assert [v["shard"] for v in ours] == [(r * 48 // world_size, (r + 1) * 48 // world_size) for r in range(world_size)]


def test_without_the_gradient_all_reduce_ranks_drift_apart():
    def no_allreduce(rank, world_size, cfg):
        import torch

        x, y = dp.shard(ref.make_dataset(cfg), rank, world_size)
        model = ref.make_model(cfg)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        for _ in range(cfg.steps):
            opt.zero_grad()
            ref.mse_loss(model, x, y).backward()
            opt.step()
        return ref.flat_params(model)

    res = mh.run_ranks(no_allreduce, 2, args=(ref.TrainConfig(),), backend="gloo", stream=False, quiet=True)
    assert ref.max_difference(res.values[0], res.values[1]) > 1e-3


def test_the_side_stream_all_reduce_sums_once_its_pending_handle_is_waited_for():
    def rank_fn(rank, world_size):
        import torch

        buf = torch.full((1000,), float(rank + 1), dtype=torch.float64)
        pending = dp.all_reduce_on_side_stream(buf)
        assert isinstance(pending, dp.PendingAllReduce) and pending.done is None  # gloo: no streams, no event
        pending.wait()
        return buf.tolist()

    res = mh.run_ranks(rank_fn, 3, backend="gloo", stream=False, quiet=True)
    assert res.values == [[6.0] * 1000] * 3


def test_allreduce_gradients_averages_every_parameter():
    def rank_fn(rank, world_size):
        import torch

        params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))]
        for k, p in enumerate(params):
            p.grad = torch.full_like(p, float(rank + 10 * k))
        dp.allreduce_gradients(params, world_size)
        return [p.grad.tolist() for p in params]

    res = mh.run_ranks(rank_fn, 2, backend="gloo", stream=False, quiet=True)
    assert res.values == [[[[0.5] * 3] * 2, [10.5] * 4]] * 2


def test_reading_the_buffer_after_the_dependency_edge_sees_the_finished_sum():
    res = mh.run_ranks(dp.stream_edge_demo, 2, args=(1 << 16, True), backend="gloo", stream=False, quiet=True)
    assert res.values == [1.0, 1.0]


def test_mean_of_local_gradients_is_the_whole_batch_gradient():
    cfg = ref.TrainConfig()
    res = mh.run_ranks(dp.local_gradient, 4, args=(cfg,), backend="gloo", stream=False, quiet=True)
    grads = torch.stack([v["grad"] for v in res.values])
    assert torch.allclose(grads.mean(0), ref.full_gradient(cfg), rtol=1e-10, atol=1e-12)
    assert [v["rows"] for v in res.values] == [12, 12, 12, 12]


def test_uneven_shards_break_the_mean_of_means():
    cfg = ref.TrainConfig(n_samples=50)
    res = mh.run_ranks(dp.train_data_parallel, 4, args=(cfg,), backend="gloo", stream=False, quiet=True)
    assert not torch.allclose(res.values[0]["params"], ref.train_single_process(cfg), rtol=1e-10, atol=1e-12)


def test_tracing_the_steps_changes_no_weight_and_records_every_phase():
    # the traced run adds an untimed warm-up step and synchronises inside its spans; the training must not change
    cfg = ref.TrainConfig()
    res = mh.run_ranks(
        dp.train_data_parallel, 2, args=(cfg, True), backend="gloo", timeout=90, stream=False, quiet=True
    )
    reference = ref.train_single_process(cfg)
    for spans, value in zip(res.spans, res.values):
        assert torch.allclose(value["params"], reference, rtol=1e-10, atol=1e-12)
        assert [s.kind for s in spans] == ["compute", "communicate", "other"] * cfg.steps
        assert all(s.seconds >= 0 for s in spans)


def test_the_seed_call_maps_argument_by_argument_onto_cupys_allreduce():
    assert dp.call_arguments(dp.SEED_CALL) == [seed for seed, _ in dp.SEED_TO_CUPY]
    assert dp.call_arguments(dp.CUPY_CALL) == [cp for _, cp in dp.SEED_TO_CUPY if cp]
    t = torch.zeros(7, dtype=torch.float64)
    assert dp.nccl_arguments(t, 1234) == (t.data_ptr(), t.data_ptr(), 7, 8, 0, 1234)
    with pytest.raises(ValueError, match="no NCCL datatype for torch.int16"):
        dp.nccl_arguments(torch.zeros(2, dtype=torch.int16), 0)


@pytest.mark.skipif(
    GPUS < 1 or not dp.cupy_nccl_available(), reason="needs an NVIDIA GPU and CuPy with its NCCL binding"
)
def test_cupys_nccl_all_reduce_equals_torchs_on_one_rank_per_gpu():
    res = mh.run_ranks(
        dp.cupy_nccl_all_reduce, GPUS, args=(1 << 16,), backend="nccl", timeout=120, stream=False, quiet=True
    )
    assert all(v["equal_to_torch"] and v["same_stream_as_torch"] for v in res.values)
    assert all(v["nccl_version"] >= 20000 for v in res.values)

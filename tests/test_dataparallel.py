"""Hand-written data parallelism must give the same weights as one process on the whole batch, and as DDP."""
import pytest
import torch

import mgpu_helpers as mh
from mgpu_helpers.lessons import dataparallel as dp


def test_shards_cover_the_dataset_without_overlap_and_stay_balanced():
    data = torch.arange(50)
    for ws in (1, 2, 3, 4, 7):
        parts = [dp.shard(data, r, ws) for r in range(ws)]
        assert torch.equal(torch.cat(parts), data)
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1
        assert [len(dp.shard(data, r, ws)) for r in range(ws)] == sizes   # repeatable


def test_shard_of_a_tuple_cuts_every_tensor_alike():
    x, y = dp.make_dataset(dp.TrainConfig(n_samples=10))
    xs, ys = dp.shard((x, y), 1, 2)
    assert torch.equal(xs, x[5:]) and torch.equal(ys, y[5:])


def test_shard_rejects_a_rank_outside_the_world():
    with pytest.raises(ValueError, match="rank must be"):
        dp.shard(torch.arange(4), 2, 2)


@pytest.mark.parametrize("world_size", [2, 4])
def test_data_parallel_equals_single_process_and_ddp(world_size):
    cfg = dp.TrainConfig()
    reference = dp.train_single_process(cfg)
    res = mh.run_ranks(dp.train_both, world_size, args=(cfg,), backend="gloo", timeout=90,
                       stream=False, quiet=True)
    ours = [v["ours"] for v in res.values]
    for r in range(world_size):
        assert torch.allclose(ours[r]["params"], reference, rtol=1e-10, atol=1e-12)
        assert torch.allclose(res.values[r]["ddp"]["params"], reference, rtol=1e-10, atol=1e-12)
    # the model really moved, so the equality is not the trivial one of untrained weights
    start = dp.flat_params(dp.make_model(cfg))
    assert dp.max_difference(reference, start) > 1e-3
    assert [v["shard"] for v in ours] == [(r * 48 // world_size, (r + 1) * 48 // world_size)
                                                for r in range(world_size)]


def test_without_the_gradient_all_reduce_ranks_drift_apart():
    def no_allreduce(rank, world_size, cfg):
        import torch
        x, y = dp.shard(dp.make_dataset(cfg), rank, world_size)
        model = dp.make_model(cfg)
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        for _ in range(cfg.steps):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
        return dp.flat_params(model)

    res = mh.run_ranks(no_allreduce, 2, args=(dp.TrainConfig(),), backend="gloo", stream=False, quiet=True)
    assert dp.max_difference(res.values[0], res.values[1]) > 1e-3


def test_reading_the_buffer_after_the_dependency_edge_sees_the_finished_sum():
    res = mh.run_ranks(dp.stream_edge_demo, 2, args=(1 << 16, True), backend="gloo", stream=False, quiet=True)
    assert res.values == [1.0, 1.0]


def test_mean_of_local_gradients_is_the_whole_batch_gradient():
    cfg = dp.TrainConfig()
    res = mh.run_ranks(dp.local_gradient, 4, args=(cfg,), backend="gloo", stream=False, quiet=True)
    grads = torch.stack([v["grad"] for v in res.values])
    assert torch.allclose(grads.mean(0), dp.full_gradient(cfg), rtol=1e-10, atol=1e-12)
    assert [v["rows"] for v in res.values] == [12, 12, 12, 12]


def test_uneven_shards_break_the_mean_of_means():
    cfg = dp.TrainConfig(n_samples=50)
    res = mh.run_ranks(dp.train_data_parallel, 4, args=(cfg,), backend="gloo", stream=False, quiet=True)
    assert not torch.allclose(res.values[0]["params"], dp.train_single_process(cfg), rtol=1e-10, atol=1e-12)


def test_tracing_the_steps_changes_no_weight_and_records_every_phase():
    # the traced run adds an untimed warm-up step and synchronises inside its spans; the training must not change
    cfg = dp.TrainConfig()
    res = mh.run_ranks(dp.train_data_parallel, 2, args=(cfg, True), backend="gloo", timeout=90,
                       stream=False, quiet=True)
    reference = dp.train_single_process(cfg)
    for spans, value in zip(res.spans, res.values):
        assert torch.allclose(value["params"], reference, rtol=1e-10, atol=1e-12)
        assert [s.kind for s in spans] == ["compute", "communicate", "other"] * cfg.steps
        assert all(s.seconds >= 0 for s in spans)

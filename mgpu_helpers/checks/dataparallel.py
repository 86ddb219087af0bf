"""Checkers for ex09: a data-parallel training step."""
from __future__ import annotations

import random

import numpy as np

from mgpu_helpers.checks.core import CheckFailed, compare, passed, rank_failure


def _dp_rank(rank, world_size, fn, config):
    import torch

    from mgpu_helpers.launcher.ranks import rank_device
    from mgpu_helpers.lessons.data_parallel import shard
    from mgpu_helpers.measure import dp_reference as ref

    device = rank_device()
    x, y = shard(ref.make_dataset(config), rank, world_size)
    model = ref.make_model(config, device)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.steps):
        fn(model, opt, x.to(device), y.to(device), world_size)
    return ref.flat_params(model).numpy()


def check_data_parallel_step(fn, world_sizes=(2, 3), timeout: float = 60.0) -> None:
    """``fn(model, optimizer, x, y, world_size)`` does one step on the local shard; after a few steps every
    rank's weights equal one process trained on the whole batch."""
    from mgpu_helpers.launcher.errors import RankError, RankTimeout
    from mgpu_helpers.launcher.launch import run_ranks
    from mgpu_helpers.measure import dp_reference as ref

    what = "data_parallel_step 要做完 本地反向传播 → 梯度 All-Reduce 取平均 → optimizer.step()"
    rng = random.Random()
    for n in world_sizes:
        config = ref.TrainConfig(n_samples=12 * rng.randint(1, 3), steps=3, seed=rng.randint(0, 10 ** 6))
        try:
            res = run_ranks(_dp_rank, n, args=(fn, config), timeout=timeout, stream=False, quiet=True)
        except RankTimeout:
            raise CheckFailed(f"{what}：{n} 个 Rank 过了 {timeout:g} 秒还没结束；是不是有的 Rank 少调了一次 "
                              "All-Reduce？每个 Rank 每一步都要调用同样的 Collective。") from None
        except RankError as exc:
            raise rank_failure(exc, fn, what) from None
        want = ref.train_single_process(config).numpy()
        for r, got in enumerate(res.values):
            hint = ""
            if got is not None and np.shape(got) == want.shape and not np.allclose(got, want, atol=1e-9):
                hint = ("提示：All-Reduce 的 SUM 之后要除以 world_size（平均）；zero_grad 要在 backward 之前；"
                        "optimizer.step() 要在 All-Reduce 之后。")
            compare(got, want, f"world_size = {n}，训练 {config.steps} 步后 rank {r} 的参数与单进程整批训练不同",
                     hint, atol=1e-9, rtol=1e-9)
    passed(f"data_parallel_step 在 world_size = {', '.join(map(str, world_sizes))} 上训练几步后，"
            "每个 Rank 的参数都等于单进程整批训练。")

"""Checkers of notebook 09 and ex09: a data-parallel step on shards uneven in every run (a wrong result is matched
against the usual mistakes, trained here), and 09's fill-ins."""

import random

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.launcher.ranks import rank_device
from mgpu_helpers.lessons.data_parallel import NCCL_DATATYPES, NCCL_SUM, shard, shard_range
from mgpu_helpers.measure import dp_reference as ref

LOCAL_GRADIENT = "mgpu_helpers.lessons.data_parallel.local_gradient"
UNEVEN_CASES = {2: (25, 37), 3: (31, 50), 4: (50, 50)}  # rows that never divide the world size
ARGUMENTS = ("sendbuf", "recvbuf", "count", "datatype", "op", "stream")
SAME_START = "行数对了，梯度却不同：每个 Rank 的模型是不是都从同一组初始权重出发（种子来自 config，和 rank 无关）？"


def _dp_rank(rank, world_size, fn, config):
    import torch

    device = rank_device()
    x, y = shard(ref.make_dataset(config), rank, world_size)
    model = ref.make_model(config, device)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    for _ in range(config.steps):
        fn(model, opt, x.to(device), y.to(device), world_size)
    return ref.flat_params(model).numpy()


def simulated_training(config, world_size: int, combine: str):
    """The final flat parameters (numpy) of data parallelism simulated in one process, the shards' mean-loss
    gradients combined by ``combine``: "weighted" (right: rows_r / N), "mean" (1 / world_size), "sum"."""
    import torch

    shards = [shard(ref.make_dataset(config), r, world_size) for r in range(world_size)]
    model = ref.make_model(config)
    opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    weight = lambda rows: {"weighted": rows / config.n_samples, "mean": 1 / world_size, "sum": 1.0}[combine]
    for _ in range(config.steps):
        opt.zero_grad()  # the gradient of the weighted sum of the shards' losses: the weighted sum of their gradients
        sum(weight(len(x)) * ref.mse_loss(model, x, y) for x, y in shards if len(x)).backward()
        opt.step()
    return ref.flat_params(model).numpy()


# The usual wrong ways to combine the shards' gradients, trained in simulated_training and matched; {sizes}: per rank.
MISTAKES = {
    "mean": "这正是“各 Rank 的局部梯度求和后除以 world_size”的结果：Shard 是 {sizes} 行，不一样大，"
    "简单平均给小 Shard 里的样本更大的权重。每个 Rank 的梯度要按它的行数加权：乘以 本地行数 / 总行数"
    "（总行数也可以用一次 All-Reduce 求出来），求和之后就不要再除以 world_size 了。",
    "sum": "这是只求和、没有平均的结果：梯度大了约 world_size 倍，相当于学习率放大了。"
    "按行数加权：乘以 本地行数 / 总行数 再求和（不是简单地除以 world_size）。",
}


def _which_mistake(got, want, config, n, sizes) -> str:
    """A hint for parameters ``got`` that differ from ``want``: the usual mistake it matches, trained here."""
    if got is None or np.shape(got) != want.shape or np.allclose(got, want, atol=1e-9, rtol=1e-9):
        return ""
    for combine, why in MISTAKES.items():
        if np.allclose(got, simulated_training(config, n, combine), atol=1e-9, rtol=1e-9):
            return "提示：" + why.format(sizes=sizes)
    return (
        "提示：zero_grad 要在 backward 之前；optimizer.step() 要在 All-Reduce 之后；每个 Rank 的梯度按"
        "本地行数 / 总行数加权后求和（不是简单地除以 world_size）。"
    )


def check_data_parallel_step(fn, world_sizes=(2, 3, 4), timeout: float = core.TRAIN_HANG_S) -> None:
    """``fn(model, optimizer, x, y, world_size)``: after steps on uneven shards, the weights of one process."""
    what = "data_parallel_step 要做完 本地反向传播 → 梯度 All-Reduce 按行数加权取平均 → optimizer.step()"
    rng = random.Random()
    for n in world_sizes:
        rows = rng.choice(UNEVEN_CASES.get(n, (4 * n + 1,)))
        config = ref.TrainConfig(n_samples=rows, steps=3, seed=rng.randint(0, 10**6))
        sizes = "/".join(str(len(shard_range(rows, r, n))) for r in range(n))
        advice = "是不是有的 Rank 少调了一次 All-Reduce？每个 Rank 每一步都要调用同样的 Collective。"
        values = core.launch(_dp_rank, n, (fn, config), what, fn, timeout, advice=advice)
        want = ref.train_single_process(config).numpy()
        for r, got in enumerate(values):
            where = f"world_size = {n}，Shard {sizes} 行，训练 {config.steps} 步后 rank {r} 的参数与单进程整批训练不同"
            hint = _which_mistake(got, want, config, n, sizes)
            core.compare(got, want, where, hint, atol=1e-9, rtol=1e-9)
    core.passed(
        f"data_parallel_step 在 world_size = {', '.join(map(str, world_sizes))}、各 Rank 行数不同的 Shard 上"
        "训练几步后，每个 Rank 的参数都等于单进程整批训练。"
    )


# -- notebook 09's fill-ins -----------------------------------------------------------------------------------
def reference_weighted_average(local_grads, rows):
    """``sum(rows[r] * g[r]) / sum(rows)`` from per-shard mean gradients (a shard with no rows is left out)."""
    import torch

    zero = torch.zeros_like(torch.as_tensor(local_grads[0], dtype=torch.float64))
    return sum((k * torch.as_tensor(g, dtype=torch.float64) for g, k in zip(local_grads, rows) if k), zero) / sum(rows)


def check_weighted_average(fn) -> None:
    """``fn(local_grads, rows) -> tensor``: per rank a mean-loss gradient over ``rows[r]`` rows (a list of
    float64 tensors; a rank with 0 rows holds NaN, there is nothing to average), the whole-batch mean."""
    import torch

    what = "weighted_average 要从各 Rank 的局部平均梯度算出整批的平均梯度"
    rng = np.random.default_rng()
    grads = lambda n, d=6: [rng.integers(-9, 10, size=d).astype(np.float64) for _ in range(n)]
    cases = [
        (grads(4), [13, 13, 12, 12], "50 行分给 4 个 Rank"),
        (grads(2), [24, 24], "两片一样大"),
        (grads(4), [1, 1, 1, 0], "3 行分给 4 个 Rank：rank 3 一行也没有"),
        (grads(3), [7, 1, 2], "很不均匀的三片"),
    ]
    for _ in range(15):
        n = int(rng.integers(2, 9))
        rows = [int(v) for v in rng.integers(0, 30, size=n)]
        rows[int(rng.integers(n))] += 1  # at least one row in all
        cases.append((grads(n, int(rng.integers(1, 9))), rows, f"{n} 个 Rank，随机的行数"))
    for grads_, rows, desc in cases:
        local = [torch.tensor(g if k else g * np.nan) for g, k in zip(grads_, rows)]  # no rows: NaN, nothing to add
        got = core.call(fn, what, [g.clone() for g in local], list(rows))
        want = reference_weighted_average([torch.tensor(g) for g in grads_], rows).numpy()
        hint, g = "", np.asarray(grads_)
        if got is not None and np.shape(got) == want.shape:
            gv = np.asarray(torch.as_tensor(got), dtype=np.float64)
            plain = np.allclose(gv, g.mean(0))
            by_ranks = np.allclose(gv, (g * np.asarray(rows)[:, None]).sum(0) / len(rows))
            hint = core.first_hint(
                (plain, "这是不加权的平均：行数不同的 Shard，每个样本的分量不一样大。按行数加权。"),
                (np.allclose(gv, g.sum(0)), "这是和，不是平均。"),
                (by_ranks, "加权之后要除以总行数，不是 Rank 数。"),
                (np.isnan(gv).any(), "没有行的 Rank 没有梯度（这里是 NaN）：它不该参与加权。"),
            )
        core.compare(got, want, f"{desc}（rows = {rows}）", hint, atol=1e-9, rtol=1e-9)
    core.passed("weighted_average 在行数相同、不同、有 Rank 一行也没有的情形下，都给出整批的平均梯度。")


def check_local_gradient(fn) -> None:
    """``fn(rank, world_size, config) -> {"rows", "loss", "grad", ...}``: step 2 alone, run in this process."""
    import torch

    what = "local_gradient 要在本 Rank 的那片数据上做一次 forward + backward"
    rng = random.Random()
    cases = [(1, 4, 50), (3, 4, 50), (2, 3, 7), (0, 2, 48), (4, 5, 5)]
    cases += [(rng.randrange(w), w, rng.randint(w, 60)) for w in (rng.randint(2, 8) for _ in range(3))]
    for rank, ws, n in cases:
        config = ref.TrainConfig(n_samples=n, seed=rng.randint(0, 10**6))
        x, y = shard(ref.make_dataset(config), rank, ws)
        model = ref.make_model(config)
        loss = ref.mse_loss(model, x, y)
        loss.backward()
        want = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        got = core.call(fn, what, rank, ws, config)
        where = f"rank {rank}，world_size = {ws}，{n} 行"
        keys = {"rows", "loss", "grad"}
        if not isinstance(got, dict) or not keys <= got.keys():
            got_what = (
                f"的 dict 缺了 {sorted(keys - got.keys())}" if isinstance(got, dict) else f" {type(got).__name__}"
            )
            raise core.CheckFailed(f'{where}：应当返回一个含 "rows"、"loss" 和 "grad" 的 dict，实际得到{got_what}。')
        if got["rows"] != len(x):
            hint = "每个 Rank 只拿 shard(..., rank, world_size) 那一片。"
            hint = "用的是整批数据，没有切片。" if got["rows"] == n else hint
            raise core.CheckFailed(f"{where}：这个 Rank 应当有 {len(x)} 行，你的函数用了 {got['rows']} 行。{hint}")
        g = torch.as_tensor(got["grad"]).detach().reshape(-1)
        summed = g.shape == want.shape and torch.allclose(g, want * len(x), rtol=1e-9, atol=1e-12)
        hint = "梯度大了“本地行数”倍：loss 要取平均（.mean()），不是求和。" if summed else SAME_START
        core.compare(g.numpy(), want.numpy(), f"{where}，局部梯度", hint, atol=1e-10, rtol=1e-9)
        got_loss = got["loss"].item() if torch.is_tensor(got["loss"]) else float(got["loss"])  # in a graph or not
        if abs(got_loss - loss.item()) > 1e-10:
            raise core.CheckFailed(f"{where}：局部 loss 应当是 {loss.item():.6f}，实际是 {got_loss:.6f}。")
    core.passed("local_gradient 在不同的 rank、不均匀的 Shard 和只有一行的 Shard 上都算对了局部梯度。")


def check_nccl_arguments(fn) -> None:
    """``fn(tensor, stream_ptr)``: the six arguments of CuPy's ``allReduce`` for the seed's in-place SUM."""
    import torch

    what = "nccl_arguments 要按伪代码给出 CuPy allReduce 的六个参数 (sendbuf, recvbuf, count, datatype, op, stream)"
    rng = random.Random()
    dtypes, pointer = (torch.float16, torch.float32, torch.float64, torch.bfloat16), lambda: rng.randint(1, 2**40)
    cases = [(torch.zeros(3, 4), 0), (torch.zeros(7, dtype=torch.float64), pointer())]
    cases += [(torch.zeros(2, 3, 5, dtype=torch.bfloat16), pointer()), (torch.zeros(0, dtype=torch.float16), pointer())]
    for _ in range(8):
        shape = [rng.randint(1, 6) for _ in range(rng.randint(1, 3))]
        cases.append((torch.zeros(*shape, dtype=rng.choice(dtypes)), rng.randint(0, 2**40)))
    for t, stream in cases:
        got, dtype = core.call(fn, what, t, stream), str(t.dtype).replace("torch.", "")
        where = f"形状 {tuple(t.shape)} 的 {dtype} 张量、stream 指针 {stream}"
        core.expect_items(got, 6, f"{where}：应当返回六个值 {ARGUMENTS}，实际得到 {got!r}。")
        got = tuple(got)
        want = (t.data_ptr(), t.data_ptr(), t.numel(), NCCL_DATATYPES[dtype], NCCL_SUM, stream)
        k = next((i for i, (g, w) in enumerate(zip(got, want)) if not (type(g) in (int, bool) and g == w)), None)
        if k is None:
            continue
        g = got[k]
        why = core.first_hint(
            (isinstance(g, torch.Tensor), "CuPy 要的是 Buffer 在显存里的地址（一个整数），不是张量对象。"),
            (k == 1 and g != t.data_ptr(), "伪代码里两个 Buffer 都写的是 grad：原地归约，接收的就是发送的那一块。"),
            (k == 2 and g == t.numel() * t.element_size(), "count 数的是元素，不是字节。"),
            (k == 2 and t.dim() > 1 and g == len(t), "count 是全部元素的个数，不是第一维的长度。"),
            (
                k == 3 and not isinstance(g, int),
                "datatype 要的是 nccl.h 里的枚举值（一个整数，见 NCCL_DATATYPES），不是 dtype 对象或名字。",
            ),
            (k == 3, "数据类型要跟着张量的 dtype 走，不能总是 float32。"),
            (k == 4, "伪代码的归约操作是 ncclSum：求和的枚举值是 NCCL_SUM。"),
            (k == 5, "最后一个参数是 Stream 的指针：把传进来的 stream_ptr 原样交出去。"),
            default="Buffer 的地址是张量数据在设备上的起始地址。" if k == 0 else "",
        )
        raise core.CheckFailed(f"{where}：第 {k + 1} 个参数 {ARGUMENTS[k]} 应当是 {want[k]!r}，你给的是 {g!r}。{why}")
    core.passed(
        f"nccl_arguments 在 {len(cases)} 个张量上（多维、四种 dtype、空张量、默认 Stream）都给出了正确的六个参数。"
    )


try_weighted_average = core.fill_in_cell(check_weighted_average, reference_weighted_average, "按行数加权的梯度平均")
try_local_gradient = core.fill_in_cell(check_local_gradient, LOCAL_GRADIENT, "本地的 forward + backward")
try_nccl_arguments = core.fill_in_cell(
    check_nccl_arguments, "mgpu_helpers.lessons.data_parallel.nccl_arguments", "nccl_arguments：伪代码第 03–04 行的参数"
)

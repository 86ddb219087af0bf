"""The checkers of notebook 09 and ex09 reject the usual wrong answers, naming them, and accept right ones
written differently from the course's solution."""

import textwrap
import warnings

import pytest
import torch

from mgpu_helpers import checks
from mgpu_helpers.checks import dataparallel as dpc
from mgpu_helpers.checks.core import CheckFailed


def _by_value(source: str, name: str):
    """A function defined from source text, travelling to ranks by value (like one defined in a cell)."""
    ns = {"__name__": "dataparallel_answer"}
    exec(textwrap.dedent(source), ns)
    return ns[name]


STEP_HEAD = """
    def step(model, optimizer, x, y, world_size):
        import torch
        import torch.distributed as dist
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
"""


@pytest.fixture(autouse=True, scope="module")
def warm_ranks():
    """The rank server up before the clocks start, forked by the fork server with what the optimizers need
    (torch._dynamo) imported, as in a notebook: so the first check does not pay for a cold start."""
    from mgpu_helpers.launcher import launch

    launch.prewarm(wait=True)
    launch.run_ranks(lambda r, world_size: r, 2, backend="gloo", timeout=120, stream=False, quiet=True)


# -- ex09: data_parallel_step on uneven shards ----------------------------------------------------------------

WRONG_STEPS = {
    # the unweighted average: right for equal shards only, so 13/13/12/12 must catch it
    "unweighted average": (
        """
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size
        optimizer.step()
        return float(loss)
    """,
        r"Shard 13/13/12/12 行.*简单平均给小 Shard",
    ),
    "sum, no average": (
        """
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
        return float(loss)
    """,
        r"只求和、没有平均",
    ),
    "step before the all-reduce": (
        """
        optimizer.step()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size
        return float(loss)
    """,
        r"rank \d 的参数.*optimizer.step\(\) 要在 All-Reduce 之后",
    ),
}


@pytest.mark.parametrize("name", list(WRONG_STEPS))
def test_a_wrong_data_parallel_step_is_named(name):
    body, message = WRONG_STEPS[name]
    fn = _by_value(STEP_HEAD + textwrap.indent(textwrap.dedent(body), "        "), "step")
    with pytest.raises(CheckFailed, match=message):
        checks.check_data_parallel_step(fn, world_sizes=(4,))


def test_a_step_that_sums_loss_over_the_global_count_passes():
    # Written differently from the solution: the loss is a sum divided by the global row count, so a
    # plain SUM all-reduce of the gradients is already the whole-batch mean.
    fn = _by_value(
        """
        def step(model, optimizer, x, y, world_size):
            import torch
            import torch.distributed as dist
            n = torch.tensor([len(x)], dtype=torch.int64)
            dist.all_reduce(n)
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).sum() / int(n)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            return float(loss)
        """,
        "step",
    )
    checks.check_data_parallel_step(fn, world_sizes=(2, 4))


# -- 09: weighted_average ---------------------------------------------------------------------------------


def _unweighted(local_grads, rows):
    return torch.stack(local_grads).mean(0)


def _by_ranks(local_grads, rows):
    return sum(k * g for g, k in zip(local_grads, rows)) / len(rows)


def _nan_included(local_grads, rows):
    return sum(k * g for g, k in zip(local_grads, rows)) / sum(rows)


@pytest.mark.parametrize(
    "fn,message",
    [
        (_unweighted, "不加权的平均"),
        (_by_ranks, "除以总行数，不是 Rank 数"),
        (_nan_included, "没有行的 Rank"),
        (lambda g, rows: sum(g), r"返回了|元素应当是"),
    ],
    ids=["unweighted", "divided by ranks", "empty shard included", "sum"],
)
def test_a_wrong_weighted_average_is_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        dpc.check_weighted_average(fn)


def test_a_weighted_average_written_with_tensors_passes(capsys):
    def weighted(local_grads, rows):
        w = torch.tensor(rows, dtype=torch.float64)
        g = torch.stack([x if k else torch.zeros_like(x) for x, k in zip(local_grads, rows)])
        return (w[:, None] * g).sum(0) / w.sum()

    dpc.check_weighted_average(weighted)
    assert capsys.readouterr().out.startswith("通过：")


def test_try_weighted_average_gives_the_reference_for_the_stub(capsys):
    assert dpc.try_weighted_average(None) is dpc.reference_weighted_average
    assert "还没写" in capsys.readouterr().out


# -- 09: local_gradient ---------------------------------------------------------------------------------


def _local(shard_it=True, mean=True):
    def local_gradient(rank, world_size, config=None):
        from mgpu_helpers.lessons.data_parallel import shard
        from mgpu_helpers.measure import dp_reference as ref

        data = ref.make_dataset(config)
        x, y = shard(data, rank, world_size) if shard_it else data
        model = ref.make_model(config)
        err = (model(x) - y) ** 2
        loss = err.mean() if mean else err.sum()
        loss.backward()
        grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        return {"rank": rank, "rows": len(x), "loss": loss.item(), "grad": grad}

    return local_gradient


def _rank_times_rows(rank, world_size, config=None):
    from mgpu_helpers.measure import dp_reference as ref

    x, y = ref.make_dataset(config)
    per = len(x) // world_size  # floor: drops the remainder, shifts the rows
    x, y = x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per]
    model = ref.make_model(config)
    loss = ref.mse_loss(model, x, y)
    loss.backward()
    return {"rows": len(x), "loss": loss.item(), "grad": torch.cat([p.grad.reshape(-1) for p in model.parameters()])}


def _own_weights(rank, world_size, config=None):
    import dataclasses

    from mgpu_helpers.lessons.data_parallel import shard
    from mgpu_helpers.measure import dp_reference as ref

    x, y = shard(ref.make_dataset(config), rank, world_size)
    model = ref.make_model(dataclasses.replace(config, seed=config.seed + rank))  # a replica of its own
    loss = ref.mse_loss(model, x, y)
    loss.backward()
    return {"rows": len(x), "loss": loss.item(), "grad": torch.cat([p.grad.reshape(-1) for p in model.parameters()])}


def _no_loss(rank, world_size, config=None):
    """The right gradient, without the "loss" the lesson asks for too."""
    from mgpu_helpers.lessons.data_parallel import shard
    from mgpu_helpers.measure import dp_reference as ref

    x, y = shard(ref.make_dataset(config), rank, world_size)
    model = ref.make_model(config)
    ref.mse_loss(model, x, y).backward()
    return {"rows": len(x), "grad": torch.cat([p.grad.reshape(-1) for p in model.parameters()])}


@pytest.mark.parametrize(
    "fn,message",
    [
        (_own_weights, "同一组初始权重"),
        (_local(shard_it=False), "用的是整批数据"),
        (_local(mean=False), r"loss 要取平均|本地行数|元素应当是"),
        (_rank_times_rows, "只拿 shard"),
        (_no_loss, r"的 dict，实际得到的 dict 缺了 \['loss'\]"),
    ],
    ids=["weights per rank", "whole batch", "summed loss", "floor split", "no loss"],
)
def test_a_wrong_local_gradient_is_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        dpc.check_local_gradient(fn)


def test_calling_the_course_local_gradient_is_refused():
    from mgpu_helpers.lessons import data_parallel

    def lazy(rank, world_size, config=None):
        return data_parallel.local_gradient(rank, world_size, config)

    with pytest.raises(CheckFailed, match="课程自己的 .*local_gradient"):
        dpc.try_local_gradient(lazy)


def test_a_local_gradient_written_with_autograd_grad_passes(capsys):
    def local_gradient(rank, world_size, config=None):
        from mgpu_helpers.lessons.data_parallel import shard_range
        from mgpu_helpers.measure import dp_reference as ref

        x, y = ref.make_dataset(config)
        r = shard_range(len(x), rank, world_size)
        model = ref.make_model(config)
        loss = ((model(x[r.start : r.stop]) - y[r.start : r.stop]) ** 2).mean()
        grads = torch.autograd.grad(loss, list(model.parameters()))
        return {"rows": len(r), "loss": loss.item(), "grad": torch.cat([g.flatten() for g in grads])}

    dpc.try_local_gradient(local_gradient)
    assert capsys.readouterr().out.startswith("通过：")


def test_a_local_gradient_that_returns_tensors_still_in_the_graph_passes_without_a_warning(capsys):
    def local_gradient(rank, world_size, config=None):
        from mgpu_helpers.lessons.data_parallel import shard
        from mgpu_helpers.measure import dp_reference as ref

        x, y = shard(ref.make_dataset(config), rank, world_size)
        model = ref.make_model(config)
        loss = ref.mse_loss(model, x, y)
        grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)  # grads that need grad
        return {"rows": len(x), "loss": loss, "grad": torch.cat([g.flatten() for g in grads])}

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's warning on float() of a tensor that requires grad fails the test
        dpc.try_local_gradient(local_gradient)
    assert capsys.readouterr().out.startswith("通过：")


# -- 09: nccl_arguments ---------------------------------------------------------------------------------


def _args(sendbuf=None, recvbuf=None, count=None, datatype=None, op=None):
    """The course's arguments with one of them replaced by ``f(tensor)``."""

    def nccl_arguments(tensor, stream_ptr):
        from mgpu_helpers.lessons import data_parallel as dp

        right = [
            tensor.data_ptr(),
            tensor.data_ptr(),
            tensor.numel(),
            dp.NCCL_DATATYPES[str(tensor.dtype).replace("torch.", "")],
            dp.NCCL_SUM,
            stream_ptr,
        ]
        for k, f in enumerate((sendbuf, recvbuf, count, datatype, op)):
            if f is not None:
                right[k] = f(tensor)
        return tuple(right)

    return nccl_arguments


@pytest.mark.parametrize(
    "fn,message",
    [
        (_args(count=lambda t: t.numel() * t.element_size()), "数的是元素，不是字节"),
        (_args(count=len), "不是第一维的长度"),
        (_args(recvbuf=lambda t: 0), "原地归约"),
        (_args(datatype=lambda t: 7), "跟着张量的 dtype 走"),
        (_args(sendbuf=lambda t: t), "不是张量对象"),
        (_args(op=lambda t: 1), "NCCL_SUM"),
    ],
    ids=["bytes", "first dimension", "separate receive buffer", "always float32", "tensor object", "wrong op"],
)
def test_wrong_nccl_arguments_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        dpc.check_nccl_arguments(fn)


def test_nccl_arguments_written_another_way_pass(capsys):
    def nccl_arguments(tensor, stream_ptr):
        codes = {torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.bfloat16: 9}  # nccl.h's values
        n = 1
        for d in tensor.shape:
            n *= d
        buf = tensor.data_ptr()
        return [buf, buf, n, codes[tensor.dtype], 0, stream_ptr]

    dpc.try_nccl_arguments(nccl_arguments)
    assert capsys.readouterr().out.startswith("通过：")


def test_the_course_nccl_arguments_is_refused():
    from mgpu_helpers.lessons import data_parallel

    with pytest.raises(CheckFailed, match="课程自己的"):
        dpc.try_nccl_arguments(lambda t, s: data_parallel.nccl_arguments(t, s))


# --------------------------------------------------------------------------------------------------------
# ex09's data-parallel step: a sum that is not averaged is named.


def test_gradients_summed_but_not_averaged_name_the_rank_and_parameter():
    wrong = _by_value(
        """
        def no_average(model, optimizer, x, y, world_size):
            import torch.distributed as dist
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            return float(loss)
        """,
        "no_average",
    )
    with pytest.raises(
        checks.CheckFailed, match=r"world_size = 2.*rank 0 的参数.*第 \d+ 个元素应当是.*除以 world_size"
    ):
        checks.check_data_parallel_step(wrong, world_sizes=(2,))

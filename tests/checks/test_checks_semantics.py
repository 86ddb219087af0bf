"""07's fill-ins and ex07's checkers: typical wrong answers are named, a correct answer written differently passes.

The rank checks run on 2 or 3 gloo ranks (functions defined from source text travel by value, as from a cell).
"""

import textwrap

import pytest

import mgpu_helpers as mh

mh.setup(show=False, prewarm=False)

from learner_code import by_value  # noqa: E402

from mgpu_helpers.checks import CheckFailed, semantics  # noqa: E402

# -- bytes_each_rank_sends (07, pure) ------------------------------------------------------------------------


def bytes_by_steps(op, nbytes, world_size, rank):
    """Correct, written differently: count the steps and the piece each step sends."""
    piece = nbytes // world_size
    steps = {"all_gather": world_size - 1, "reduce_scatter": world_size - 1, "all_reduce": 2 * (world_size - 1)}
    if op in steps:
        return steps[op] * piece
    last = 0 if op == "reduce" else world_size - 1
    return 0 if rank == last else nbytes


def test_bytes_by_steps_passes(capsys):
    semantics.check_bytes_each_rank_sends(bytes_by_steps)
    assert capsys.readouterr().out.startswith("通过：")


def _but(op_wrong, value):
    def fn(op, nbytes, world_size, rank):
        return value(nbytes, world_size, rank) if op == op_wrong else bytes_by_steps(op, nbytes, world_size, rank)

    return fn


@pytest.mark.parametrize(
    "wrong, message",
    [
        (_but("all_reduce", lambda s, n, r: 2 * s), "all_reduce.*应当发出"),
        (_but("all_gather", lambda s, n, r: s), "n - 1 步"),
        (_but("reduce", lambda s, n, r: s), "reduce，rank 0（Root）.*只收不发"),
        (_but("broadcast", lambda s, n, r: (n - 1) * s if r == 0 else 0), "broadcast，rank 0（Root）"),
        (_but("broadcast", lambda s, n, r: 0 if r == 0 else s), "broadcast.*链尾"),
        (_but("all_reduce", lambda s, n, r: (n - 1) * s // n), "Reduce-Scatter \\+ All-Gather"),
        (_but("all_gather", lambda s, n, r: None), "all_gather，rank 0 应当发出 .*你的答案是 None"),
    ],
    ids=[
        "all-reduce as 2 S",
        "all-gather in n steps",
        "reduce root sends",
        "broadcast as a star from the root",
        "broadcast root silent",
        "all-reduce as one pass",
        "all-gather without an answer",
    ],
)
def test_wrong_bytes_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        semantics.check_bytes_each_rank_sends(wrong)


def test_the_notebooks_shape_names_the_reduce_scatter_mistake_first():
    """07 writes all_reduce as twice the learner's reduce_scatter: a wrong reduce_scatter is named as itself."""

    def wrong(op, nbytes, world_size, rank):
        if op == "all_reduce":
            return 2 * wrong("reduce_scatter", nbytes, world_size, rank)
        return nbytes if op == "reduce_scatter" else bytes_by_steps(op, nbytes, world_size, rank)

    with pytest.raises(CheckFailed, match="的 reduce_scatter，rank 0.*n - 1 步"):
        semantics.check_bytes_each_rank_sends(wrong)


def test_the_reference_is_not_an_answer():
    with pytest.raises(CheckFailed, match="参考答案"):
        semantics.check_bytes_each_rank_sends(semantics.reference_bytes_each_rank_sends)


def test_unwritten_bytes_fall_back_to_the_reference(capsys):
    assert semantics.try_bytes_each_rank_sends(None) is semantics.reference_bytes_each_rank_sends
    assert "还没写" in capsys.readouterr().out


# -- all_gather_uneven (07, ranks) ---------------------------------------------------------------------------

GATHER_OK = """
def all_gather_uneven(rank, world_size, x):
    # correct, written differently: all_gather_into_tensor over a padded flat buffer
    import torch
    import torch.distributed as dist
    n = torch.tensor([x.numel()], device=x.device)
    sizes = torch.zeros(world_size, dtype=n.dtype, device=x.device)
    dist.all_gather_into_tensor(sizes, n)
    longest = int(sizes.max())
    padded = torch.cat([x, x.new_zeros(longest - x.numel())])
    flat = x.new_empty(world_size * longest)
    dist.all_gather_into_tensor(flat, padded)
    return torch.cat([flat[r * longest: r * longest + int(sizes[r])] for r in range(world_size)])
"""


def test_uneven_gather_written_differently_passes(capsys):
    semantics.check_all_gather_uneven(by_value(GATHER_OK, "all_gather_uneven"), world_sizes=(3,))
    assert "通过" in capsys.readouterr().out


@pytest.mark.parametrize(
    "body, message",
    [
        (
            """
    n = torch.tensor([x.numel()], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(world_size)]
    dist.all_gather(sizes, n)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=x.dtype, device=x.device)
    padded[: x.numel()] = x
    bufs = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(bufs, padded)
    return torch.cat(bufs)
    """,
            "填充（padding）的部分要按每个 Rank 的真实长度截掉",
        ),
        (
            """
    return x
    """,
            "形状",
        ),
        (
            """
    n = torch.tensor([x.numel()], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(world_size)]
    dist.all_gather(sizes, n)
    sizes = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(sizes), dtype=x.dtype, device=x.device)
    padded[: x.numel()] = x
    bufs = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(bufs, padded)
    return torch.cat([b[:k] for b, k in reversed(list(zip(bufs, sizes)))])
    """,
            "片段的顺序反了",
        ),
    ],
    ids=["padding not trimmed", "only its own piece", "pieces in reverse rank order"],
)
def test_wrong_uneven_gathers_are_named(body, message):
    src = (
        "def all_gather_uneven(rank, world_size, x):\n    import torch\n    import torch.distributed as dist\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    )
    with pytest.raises(CheckFailed, match=message):
        semantics.check_all_gather_uneven(by_value(src, "all_gather_uneven"), world_sizes=(3,))


def test_the_uneven_gather_reference_is_not_an_answer():
    with pytest.raises(CheckFailed, match="参考答案"):
        semantics.try_all_gather_uneven(semantics.reference_all_gather_uneven)


# -- reduce_scatter_uneven (ex07) ---------------------------------------------------------------------------------

RS_UNEVEN_OK = """
def reduce_scatter_uneven(rank, world_size, x, sizes):
    # correct, written differently: one reduce per part, to the rank that owns it
    import torch
    import torch.distributed as dist
    mine = None
    for owner, part in enumerate(torch.split(x, sizes)):
        buf = part.clone()
        dist.reduce(buf, dst=owner)
        if owner == rank:
            mine = buf
    return mine
"""


def test_reduce_per_part_passes(capsys):
    semantics.check_reduce_scatter_uneven(by_value(RS_UNEVEN_OK, "reduce_scatter_uneven"), world_sizes=(3,))
    assert "通过" in capsys.readouterr().out


@pytest.mark.parametrize(
    "body, message",
    [
        (
            """
    total = x.clone()
    dist.all_reduce(total)
    start = sum(sizes[:rank])
    return total[start:start + sizes[rank]]
    """,
            "不许 All-Reduce.*dist.all_reduce",
        ),
        (
            """
    longest = max(sizes)
    padded = [torch.cat([p, p.new_zeros(longest - p.numel())]) for p in torch.split(x, sizes)]
    mine = torch.zeros(longest, dtype=x.dtype)
    dist.reduce_scatter(mine, padded)
    return mine
    """,
            "填充的部分要按 sizes\\[rank\\] 截掉|形状",
        ),
        (
            """
    from torch.distributed import all_gather as ag
    parts = [torch.empty_like(x) for _ in range(world_size)]
    ag(parts, x)
    start = sum(sizes[:rank])
    return torch.stack(parts).sum(0)[start:start + sizes[rank]]
    """,
            "dist.all_gather",
        ),
    ],
    ids=["all-reduce then slice", "padding kept", "all-gather imported under another name"],
)
def test_wrong_uneven_reduce_scatters_are_named(body, message):
    src = (
        "def reduce_scatter_uneven(rank, world_size, x, sizes):\n    import torch\n    import torch.distributed as dist\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    )
    with pytest.raises(CheckFailed, match=message):
        semantics.check_reduce_scatter_uneven(by_value(src, "reduce_scatter_uneven"), world_sizes=(3,))


# -- all_reduce_rs_ag (ex07) -------------------------------------------------------------------------------------

RS_AG_OK = """
def all_reduce_rs_ag(rank, world_size, x):
    # correct, written differently: the tensor forms of both collectives
    import torch
    import torch.distributed as dist
    mine = x.new_empty(x.numel() // world_size)
    dist.reduce_scatter_tensor(mine, x)
    out = x.new_empty(x.numel())
    dist.all_gather_into_tensor(out, mine)
    return out
"""


def test_tensor_forms_pass(capsys):
    semantics.check_all_reduce_rs_ag(by_value(RS_AG_OK, "all_reduce_rs_ag"), world_sizes=(2,))
    assert "通过" in capsys.readouterr().out


@pytest.mark.parametrize(
    "body, message",
    [
        (
            """
    parts = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(parts, x)
    return torch.stack(parts).sum(0)
    """,
            "没有调用 dist.reduce_scatter.*本地求和",
        ),
        (
            """
    import torch.distributed.distributed_c10d as c10d
    c10d.all_reduce(x)
    return x
    """,
            "dist.all_reduce",
        ),
        (
            """
    mine = x.new_empty(x.numel() // world_size)
    dist.reduce_scatter(mine, list(x.chunk(world_size)))
    return mine
    """,
            "只是自己那一段",
        ),
        (
            """
    mine = x.new_empty(x.numel() // world_size)
    dist.reduce_scatter(mine, list(x.chunk(world_size)))
    parts = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(parts, x)
    return torch.stack(parts).sum(0)
    """,
            "All-Gather 一共收了",
        ),
    ],
    ids=[
        "all-gather plus a local sum",
        "all_reduce through distributed_c10d",
        "reduce-scatter only",
        "reduce-scatter for show, then all-gather of the whole x",
    ],
)
def test_wrong_rs_ag_are_named(body, message):
    src = (
        "def all_reduce_rs_ag(rank, world_size, x):\n    import torch\n    import torch.distributed as dist\n"
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    )
    with pytest.raises(CheckFailed, match=message):
        semantics.check_all_reduce_rs_ag(by_value(src, "all_reduce_rs_ag"), world_sizes=(2,))


def test_all_reduce_bound_at_module_level_is_caught():
    fn = by_value(
        """
from torch.distributed import all_reduce as total_of
def all_reduce_rs_ag(rank, world_size, x):
    total_of(x)
    return x
""",
        "all_reduce_rs_ag",
    )
    with pytest.raises(CheckFailed, match="dist.all_reduce"):
        semantics.check_all_reduce_rs_ag(fn, world_sizes=(2,))

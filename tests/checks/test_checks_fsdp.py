"""14's fill-ins and ex14's checker: typical wrong answers are named, a correct answer written differently
passes; DTensor's rule (the checker's reference) agrees with FSDP2's real shards in a fake world; the FSDP2
rank function on 2 GPUs (NCCL) gives what it gives on gloo."""

import math

import pytest
import torch

import mgpu_helpers as mh

mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import CheckFailed, fsdp  # noqa: E402
from mgpu_helpers.tools import exercises  # noqa: E402


def _stub(name: str, args: str):
    src, _ = exercises.stub_source(f"def {name}({args}):\n    ### BEGIN SOLUTION\n    return 0\n    ### END SOLUTION")
    ns = {}
    exec(src, ns)
    return ns[name]


# -- local_slices (14) ------------------------------------------------------------------------------------------


def slices_by_chunk(shape, mesh_shape, coords, shard_dims):
    """Correct, written differently: torch.chunk on the indices themselves, mesh dim after mesh dim."""
    index = [torch.arange(n) for n in shape]
    for size, coord, dim in zip(mesh_shape, coords, shard_dims):
        if dim is not None:
            pieces = list(index[dim].chunk(size))
            index[dim] = pieces[coord] if coord < len(pieces) else index[dim][:0]
    return [(int(i[0]) if len(i) else 0, len(i)) for i in index]


def test_local_slices_written_differently_pass(capsys):
    fsdp.check_local_slices(slices_by_chunk)
    assert capsys.readouterr().out.startswith("通过：")


def _by_rule(slip):
    return lambda shape, mesh, coords, dims: fsdp._slips(shape, mesh, coords, dims, slip)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (_by_rule("floor"), "n // N"),
        (_by_rule("array_split"), "array_split"),
        (_by_rule("unclipped"), "越过了这一维的末尾"),
        (_by_rule("flat"), "在第一个切出的那一段里再切"),
        (_by_rule("swapped"), "坐标的顺序用反了"),
        (
            lambda shape, mesh, coords, dims: [
                slices_by_chunk(shape, mesh, coords, dims)[d] for d in dims if d is not None
            ],
            "每一维",
        ),
    ],
    ids=[
        "n // N chunks",
        "array_split",
        "not cut at the end",
        "second mesh dim cuts the whole dim",
        "coords swapped",
        "only the sharded dims",
    ],
)
def test_wrong_slices_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        fsdp.check_local_slices(wrong)


def test_asking_dtensor_is_not_writing_it():
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

    def lazy(shape, mesh_shape, coords, shard_dims):
        from torch.distributed.tensor import Replicate, Shard

        n, s = _compute_local_shape_and_global_offset(
            shape, mesh_shape, list(coords), [Replicate() if d is None else Shard(d) for d in shard_dims]
        )
        return list(zip(s, n))

    with pytest.raises(CheckFailed, match="课程自己的"):
        fsdp.check_local_slices(lazy)


def test_the_local_slices_stub_falls_back_to_the_course_version(capsys):
    got = fsdp.try_local_slices(_stub("local_slices", "shape, mesh_shape, coords, shard_dims"))
    assert got is mh.lessons.fsdp.local_slices and "还没写" in capsys.readouterr().out
    assert fsdp.try_local_slices(slices_by_chunk) is slices_by_chunk


def _fake_world_shards(rank, world_size, cases):
    """In a fake world of each N, as each fake rank: FSDP2's local shard shapes of a Linear on the meta device."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.destroy_process_group()
    out = []
    for n, fake_rank, (rows, cols) in cases:
        dist.init_process_group("fake", store=FakeStore(), rank=fake_rank, world_size=n)
        with torch.device("meta"):
            layer = torch.nn.Linear(cols, rows)
        fully_shard(layer, mesh=init_device_mesh("cpu", (n,)))
        out.append([tuple(p.to_local().shape) for p in layer.parameters()])
        dist.destroy_process_group()
    return out


def test_the_checkers_reference_is_what_fsdp2_really_cuts():
    cases = [
        (n, r, shape)
        for n, shape in [(4, (5, 3)), (3, (7, 2)), (8, (3, 4)), (1024, (50, 8))]
        for r in sorted({0, 1, n // 2, n - 1})
    ]
    got = mh.run_ranks(_fake_world_shards, world_size=1, args=(cases,), quiet=True, stream=False).values[0]
    for (n, r, (rows, cols)), shapes in zip(cases, got):
        (w_start, w_rows), (_, w_cols) = fsdp.dtensor_slices((rows, cols), (n,), (r,), (0,))
        assert shapes[0] == (w_rows, w_cols), (n, r, shapes)
        assert shapes[1] == (fsdp.dtensor_slices((rows,), (n,), (r,), (0,))[0][1],)
        assert mh.lessons.fsdp.local_slices((rows, cols), (n,), (r,), (0,))[0][1] == w_rows


# -- model_state_bytes (14) ----------------------------------------------------------------------------------------


def state_bytes_by_paper(strategy, psi, world_size, k=12):
    """Correct, written differently: the ZeRO paper's four formulas."""
    return {
        "dp": (2 + 2 + k) * psi,
        "zero1": 4 * psi + k * psi / world_size,
        "zero2": 2 * psi + (2 + k) * psi / world_size,
        "zero3": (2 + 2 + k) * psi / world_size,
    }[strategy]


def test_state_bytes_written_differently_pass(capsys):
    fsdp.check_model_state_bytes(state_bytes_by_paper)
    assert capsys.readouterr().out.startswith("通过：")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda s, p, n, k=12: state_bytes_by_paper("zero2" if s == "zero1" else s, p, n, k), "只切优化器状态"),
        (lambda s, p, n, k=12: state_bytes_by_paper("zero1" if s == "zero2" else s, p, n, k), "把梯度也切开"),
        (
            lambda s, p, n, k=12: (
                state_bytes_by_paper(s, p, n, k) * (8 + k) / (4 + k)
                if s in ("dp", "zero3")
                else state_bytes_by_paper(s, p, n, k)
            ),
            "16 位",
        ),
        (lambda s, p, n, k=12: (4 + k) * p / n if s != "dp" else (4 + k) * p, "不切参数"),
        (lambda s, p, n, k=12: (4 + k) * p, "没有除以 N"),
        (lambda s, p, n, k=12: str(state_bytes_by_paper(s, p, n, k)), "一个数"),
    ],
    ids=[
        "zero1 shards gradients",
        "zero2 keeps gradients whole",
        "fp32 parameters and gradients",
        "zero1/2 shard the parameters",
        "nothing divided",
        "a string",
    ],
)
def test_wrong_state_bytes_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        fsdp.check_model_state_bytes(wrong)


def test_the_memory_model_is_not_the_learners(capsys):
    def lazy(strategy, psi, world_size, k=12):
        plan = mh.models.memory.memory_plan(
            fsdp.PLAN_NAME[strategy], world_size, float("inf"), params=2 * psi, grads=2 * psi, optimizer=k * psi
        )
        return max(plan.totals)

    with pytest.raises(CheckFailed, match="课程自己的"):
        fsdp.check_model_state_bytes(lazy)
    got = fsdp.try_model_state_bytes(_stub("model_state_bytes", "strategy, psi, world_size, k=12"))
    assert got is mh.lessons.fsdp.model_state_bytes and "还没写" in capsys.readouterr().out


# -- cheapest_stage (ex14) -----------------------------------------------------------------------------------------


def stage_by_filter(psi, world_size, capacity, k=12):
    """Correct, written differently: every stage that fits, then the first."""
    fits = [s for s in ("dp", "zero1", "zero2", "zero3") if state_bytes_by_paper(s, psi, world_size, k) <= capacity]
    return fits[0] if fits else None


def test_stage_written_differently_passes(capsys):
    fsdp.check_cheapest_stage(stage_by_filter)
    assert capsys.readouterr().out.startswith("通过：")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda p, n, c, k=12: "zero3" if state_bytes_by_paper("zero3", p, n, k) <= c else None, "不要总挑最省内存的"),
        (
            lambda p, n, c, k=12: next(
                (s for s in ("dp", "zero1", "zero2", "zero3") if state_bytes_by_paper(s, p, n, k) < c), None
            ),
            "正好等于容量",
        ),
        (lambda p, n, c, k=12: stage_by_filter(p, n, c, k) or "zero3", "返回 None"),
        (lambda p, n, c, k=12: stage_by_filter(p, n, c) if stage_by_filter(p, n, c) else None, "k 要传下去"),
    ],
    ids=["always the most sharded", "strict <", "never None", "k ignored"],
)
def test_wrong_stages_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        fsdp.check_cheapest_stage(wrong)


# -- the NCCL path --------------------------------------------------------------------------------------------------


@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason="needs 2 GPUs: FSDP2 on NCCL ranks, one GPU each (on CPU the notebook runs it on gloo)",
)
def test_fsdp_rank_on_two_gpus_gives_what_gloo_gives():
    gpu = mh.run_ranks(mh.lessons.fsdp.fsdp_rank, world_size=2, backend="nccl", quiet=True, stream=False).values
    cpu = mh.run_ranks(mh.lessons.fsdp.fsdp_rank, world_size=2, backend="gloo", quiet=True, stream=False).values
    for g, c in zip(gpu, cpu):
        assert {k: g[k] for k in ("shapes", "param_bytes", "grad_bytes", "state_bytes", "per_step")} == {
            k: c[k] for k in ("shapes", "param_bytes", "grad_bytes", "state_bytes", "per_step")
        }
        assert torch.allclose(g["params"], c["params"], atol=1e-5)


# -- shard_bytes (ex14) ----------------------------------------------------------------------------------------------


def shard_bytes_by_chunk(shapes, world_size, rank, bytes_per_element=4):
    """Correct, written differently: torch.chunk on a tensor of each shape, the rank's piece if there is one."""
    total = 0
    for shape in shapes:
        pieces = torch.empty(shape, device="meta").chunk(world_size)
        total += pieces[rank].numel() if rank < len(pieces) else 0
    return total * bytes_per_element


def test_shard_bytes_written_differently_pass(capsys):
    fsdp.check_shard_bytes(shard_bytes_by_chunk)
    assert capsys.readouterr().out.startswith("通过：")


def _shard_by_rule(rule, per_row=True, scale=True):
    def wrong(shapes, n, rank, b=4):
        rows = [fsdp._split(s[0], n, rank, rule)[1] for s in shapes]
        return sum(r * (math.prod(s[1:]) if per_row else 1) for r, s in zip(rows, shapes)) * (b if scale else 1)

    return wrong


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda shapes, n, rank, b=4: b * sum(math.prod(s) for s in shapes) / n, "不是把所有参数平均分"),
        (_shard_by_rule("floor"), "不是 行数 // N"),
        (_shard_by_rule("array_split"), "不是前几段各多一行"),
        (_shard_by_rule("unclipped"), "截到行数为止"),
        (_shard_by_rule("ceil", scale=False), "bytes_per_element"),
        (_shard_by_rule("ceil", per_row=False), "一行的元素个数"),
    ],
    ids=["an even split", "n // N rows", "array_split", "not cut at the end", "elements, not bytes", "rows only"],
)
def test_wrong_shard_bytes_are_named(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        fsdp.check_shard_bytes(wrong)

"""Notebook 03's fill-ins (env_for, init_for) and ex03's join_and_sum: typical wrong answers are named, a
correct answer written another way passes, and the init call the ranks really made is held against the rule."""

import textwrap

import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from learner_code import by_value  # noqa: E402

from mgpu_helpers import checks  # noqa: E402
from mgpu_helpers.checks import groups  # noqa: E402
from mgpu_helpers.checks.core import NOT_DONE, CheckFailed  # noqa: E402

# -- env_for ----------------------------------------------------------------------------------------------------


def test_env_for_built_another_way_passes(capsys):
    def env_for(rank, world_size, master_port, nproc_per_node=None, master_addr="127.0.0.1"):
        per_node = nproc_per_node or world_size
        node = rank // per_node
        values = dict(
            RANK=rank,
            WORLD_SIZE=world_size,
            LOCAL_RANK=rank - node * per_node,
            LOCAL_WORLD_SIZE=per_node,
            MASTER_ADDR=master_addr if nproc_per_node else "localhost",
            MASTER_PORT=master_port,
        )
        return {k: str(v) for k, v in values.items()}

    groups.check_env_for(env_for)
    assert capsys.readouterr().out.startswith("通过：")


SIG = "def env_for(rank, world_size, master_port, nproc_per_node=None, master_addr='127.0.0.1'):\n    p = nproc_per_node or world_size\n"


@pytest.mark.parametrize(
    "body,why",
    [
        (
            "return dict(RANK=rank, WORLD_SIZE=world_size, LOCAL_RANK=rank % p, LOCAL_WORLD_SIZE=p, "
            "MASTER_ADDR=master_addr, MASTER_PORT=master_port)",
            "值都是字符串",
        ),
        (
            "return dict(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank % p), LOCAL_WORLD_SIZE=str(p), "
            "MASTER_ADDR=master_addr, MASTER_PORT=str(master_port + rank))",
            "MASTER_PORT 对每个 rank 都一样",
        ),
        (
            "return dict(RANK=str(rank + 1), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank % p), "
            "LOCAL_WORLD_SIZE=str(p), MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))",
            "rank 从 0 数起",
        ),
        (
            "return dict(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR=master_addr, "
            "MASTER_PORT=str(master_port))",
            "少了 LOCAL_RANK, LOCAL_WORLD_SIZE",
        ),
        (
            "return dict(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size), "
            "MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))",
            "每台机器都从 0 数起",
        ),
        (
            "return dict(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank // p), LOCAL_WORLD_SIZE=str(p), "
            "MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))",
            "机器的编号",
        ),
        (
            "return dict(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank % p), LOCAL_WORLD_SIZE=str(world_size), "
            "MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))",
            "不是所有机器的总数",
        ),
        (
            "return dict(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank % p), LOCAL_WORLD_SIZE=str(p), "
            "MASTER_ADDR='127.0.0.1', MASTER_PORT=str(master_port))",
            "写死成了回环地址",
        ),
    ],
    ids=[
        "ints",
        "a port per rank",
        "counted from 1",
        "no LOCAL_*",
        "local = global",
        "node index",
        "local size = world",
        "loopback hard-coded",
    ],
)
def test_env_for_names_the_typical_mistakes(body, why):
    with pytest.raises(CheckFailed, match=why):
        groups.check_env_for(by_value(SIG + f"    {body}\n", "env_for"))


def test_try_env_for_gives_the_reference_while_unwritten(capsys):
    stub = by_value(
        """
        def env_for(rank, world_size, master_port):
            raise NotImplementedError("练习：补全这里（约 3 行）")
        """,
        "env_for",
    )
    assert groups.try_env_for(stub) is groups.reference_env_for
    assert "还没写" in capsys.readouterr().out


# -- init_for ---------------------------------------------------------------------------------------------------

INIT_HEAD = """
    def init_for(rank, world_size, method):
        import os
        import torch
        import torch.distributed as dist
        backend = os.environ["MGPU_BACKEND"]
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        if method == "file://":
            dist.init_process_group(backend, init_method=os.environ["MGPU_INIT_METHOD"], world_size=world_size, rank=rank)
            return
"""
BIND = """        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
"""
GOOD_REST = """
    if method == "env://":
        dist.init_process_group(backend, init_method="env://")
    else:
        url = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group(backend, init_method=url, world_size=world_size, rank=rank)
"""


def _init(body: str, bind: str | None = None):
    head = INIT_HEAD if bind is None else INIT_HEAD.replace(BIND, textwrap.indent(textwrap.dedent(bind), " " * 8))
    return by_value(head + textwrap.indent(textwrap.dedent(body), " " * 8), "init_for")


def test_init_for_passing_everything_explicitly_passes(capsys):
    groups.check_init_for(
        _init("""
        addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
        url = "env://" if method == "env://" else "tcp://" + addr + ":" + port
        dist.init_process_group(backend, init_method=url, world_size=world_size, rank=rank)
        """)
    )
    assert capsys.readouterr().out.startswith("通过：")


def test_init_for_that_meets_in_the_file_for_env_is_told_to_read_the_environment():
    with pytest.raises(CheckFailed, match="env:// 分支要写"):
        groups.check_init_for(
            _init("""
            dist.init_process_group(backend, init_method=os.environ["MGPU_INIT_METHOD"], world_size=world_size, rank=rank)
            """)
        )


def test_init_for_with_tcp_but_without_rank_and_world_size_is_told_what_to_pass():
    with pytest.raises(CheckFailed, match="method = 'tcp://'.*rank 和 world_size 要另外传"):
        groups.check_init_for(
            _init("""
            if method == "env://":
                dist.init_process_group(backend, init_method="env://")
            else:
                dist.init_process_group(backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
            """)
        )


def test_init_for_that_gives_a_url_without_tcp_is_named():
    with pytest.raises(CheckFailed, match="method = 'tcp://'.*应当是 tcp://地址:端口"):
        groups.check_init_for(
            _init("""
            dist.init_process_group(backend, init_method="env://")
            """)
        )


def test_init_for_stub_is_not_done():
    stub = _init("""
        raise NotImplementedError("练习：补全这里（约 6 行）")
        """)
    with pytest.raises(CheckFailed) as info:
        groups.check_init_for(stub)
    assert str(info.value).startswith(NOT_DONE)


# -- ex03: join_and_sum through a FileStore ---------------------------------------------------------------------

JOIN = """
    def join_and_sum(rank, world_size, x):
        import os
        import torch.distributed as dist
        backend = os.environ["MGPU_BACKEND"]
        path = os.environ["MGPU_INIT_METHOD"][len("file://"):]
"""


def _join(body: str):
    return by_value(JOIN + textwrap.indent(textwrap.dedent(body), " " * 8), "join_and_sum")


def test_join_and_sum_with_positional_store_arguments_passes(capsys):
    groups.check_join_and_sum(
        _join("""
        dist.init_process_group(backend, store=dist.FileStore(path, world_size), world_size=world_size, rank=rank)
        total = x.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        dist.destroy_process_group()
        return total
        """),
        world_sizes=(2, 3),
    )
    assert capsys.readouterr().out.startswith("通过：")


def test_join_and_sum_through_init_method_is_told_to_make_the_store():
    with pytest.raises(CheckFailed, match="要自己建 dist.FileStore"):
        groups.check_join_and_sum(
            _join("""
            dist.init_process_group(backend, init_method="file://" + path, world_size=world_size, rank=rank)
            dist.all_reduce(x)
            dist.destroy_process_group()
            return x
            """),
            world_sizes=(2,),
        )


def test_join_and_sum_that_sums_only_its_own_x_is_named():
    with pytest.raises(CheckFailed, match="还要做一次 all_reduce"):
        groups.check_join_and_sum(
            _join("""
            dist.init_process_group(backend, store=dist.FileStore(path, world_size), world_size=world_size, rank=rank)
            dist.destroy_process_group()
            return x
            """),
            world_sizes=(2,),
        )


def test_join_and_sum_that_stays_in_the_group_is_told_to_leave():
    with pytest.raises(CheckFailed, match="返回时进程组还开着"):
        groups.check_join_and_sum(
            _join("""
            dist.init_process_group(backend, store=dist.FileStore(path, world_size), world_size=world_size, rank=rank)
            dist.all_reduce(x)
            return x
            """),
            world_sizes=(2,),
        )


# -- init_for: one GPU per rank under nccl (checked with nccl pretended, so on a CPU machine too) --------------------


@pytest.mark.parametrize(
    "bind, why",
    [
        ("", "没有选 GPU"),  # forgotten
        ('if backend == "nccl":\n    torch.cuda.set_device(0)\n', "选的是 cuda:0"),  # every rank on GPU 0
        ('if backend == "nccl":\n    torch.cuda.set_device(rank)\n', "用了全局 rank"),  # global, not local
    ],
)
def test_init_for_that_does_not_bind_its_own_gpu_is_named(bind, why):
    with pytest.raises(CheckFailed, match=why):
        groups.check_init_for(_init(GOOD_REST, bind=bind))


def test_init_for_that_binds_after_joining_is_told_to_bind_first():
    late = _init(
        textwrap.dedent(GOOD_REST)
        + 'if backend == "nccl":\n    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n',
        bind="",
    )
    with pytest.raises(CheckFailed, match="之后才调用"):
        groups.check_init_for(late)


def test_init_for_binding_through_device_id_passes(capsys):
    by_device_id = _init(
        """
        local = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else None
        if method == "env://":
            dist.init_process_group(backend, init_method="env://", device_id=local)
        else:
            url = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
            dist.init_process_group(backend, init_method=url, world_size=world_size, rank=rank, device_id=local)
        """,
        bind="",
    )
    groups.check_init_for(by_device_id)
    assert capsys.readouterr().out.startswith("通过：")


def test_binding_slip_reads_the_recorded_calls():
    assert groups.binding_slip([("set_device", 1), ("init", None)]) == ""
    assert groups.binding_slip([("init", 1)]) == ""
    assert "cuda:3" in groups.binding_slip([("set_device", 3), ("init", None)])


# --------------------------------------------------------------------------------------------------------
# ex03's placement and join_and_sum: the usual wrong answers named.


def test_placement_that_uses_the_global_rank_as_local_rank_is_explained():
    def global_as_local(rank, nproc_per_node, visible):
        return rank // nproc_per_node, rank, visible[rank % nproc_per_node]

    with pytest.raises(
        checks.CheckFailed, match=r"rank 5，每台机器 4 个进程.*local_rank 应当是 1，你的是 5.*不是全局的 rank"
    ):
        checks.check_placement(global_as_local)


def test_placement_that_ignores_cuda_visible_devices_names_the_physical_gpu():
    def logical_gpu(rank, nproc_per_node, visible):
        return rank // nproc_per_node, rank % nproc_per_node, rank % nproc_per_node

    with pytest.raises(checks.CheckFailed, match=r"physical_gpu 应当是 \d+，你的是 \d+.*CUDA_VISIBLE_DEVICES="):
        checks.check_placement(logical_gpu)


def test_joining_without_leaving_the_group_is_reported():
    stays = by_value(
        """
        def stays(rank, world_size, x):
            import os
            import torch.distributed as dist
            dist.init_process_group(backend=os.environ["MGPU_BACKEND"], init_method="env://")
            dist.all_reduce(x)
            return x.cpu()
        """,
        "stays",
    )
    with pytest.raises(checks.CheckFailed, match=r"rank \d 返回时进程组还开着.*destroy_process_group"):
        checks.check_join_and_sum(stays, world_sizes=(2,))


def test_joining_but_not_summing_names_the_rank_and_its_own_input():
    # rank 0 is named unless its own x happens to equal the sum (the other input all zero): then rank 1 is
    lonely = by_value(
        """
        def lonely(rank, world_size, x):
            import os
            import torch.distributed as dist
            dist.init_process_group(backend=os.environ["MGPU_BACKEND"], init_method="env://")
            dist.destroy_process_group()
            return x
        """,
        "lonely",
    )
    with pytest.raises(
        checks.CheckFailed, match=r"world_size = 2，rank [01]：第 0 个元素应当是.*还要做一次 all_reduce"
    ):
        checks.check_join_and_sum(lonely, world_sizes=(2,))

"""Checkers for notebook 03 and ex03: a rank's environment, joining a process group by hand, where a rank runs."""

import os
from datetime import timedelta

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.launcher.errors import RankError, RankTimeout
from mgpu_helpers.launcher.launch import run_ranks
from mgpu_helpers.launcher.ranks import rank_device


def reference_placement(rank: int, nproc_per_node: int, visible: list[int]) -> tuple[int, int, int]:
    """Where global ``rank`` runs when every node starts ``nproc_per_node`` ranks and rank k of a node uses
    ``cuda:k``, with ``CUDA_VISIBLE_DEVICES`` = ``visible`` on every node: ``(node, local_rank, physical GPU)``."""
    return rank // nproc_per_node, rank % nproc_per_node, visible[rank % nproc_per_node]


def _explain_placement(field: str, rank: int, nproc: int, visible: list[int], got) -> str:
    global_rank = field == "local_rank" and got == rank
    return core.first_hint(
        (field == "node", "每台机器起 nproc_per_node 个进程，rank 按机器依次编号：第几台机器看整除。"),
        (global_rank, "local_rank 是这台机器上的编号，不是全局的 rank：两台机器各有自己的 0, 1, ……"),
        (field == "local_rank", "local_rank 是 rank 除以 nproc_per_node 的余数。"),
        (
            got == rank % nproc,
            f"cuda:{rank % nproc} 是进程里看到的编号；CUDA_VISIBLE_DEVICES={','.join(map(str, visible))} "
            "时它是列表里的第 local_rank 个物理 GPU。",
        ),
        default="物理 GPU 要从 CUDA_VISIBLE_DEVICES 的列表里按 local_rank 取。",
    )


def check_placement(fn) -> None:
    """``fn(rank, nproc_per_node, visible) -> (node, local_rank, physical_gpu)`` on fixed and random cases."""
    what = "placement 要给出 (node, local_rank, physical_gpu)"
    rng = core.new_rng()
    cases = [(5, 4, [0, 1, 2, 3]), (1, 2, [1, 0]), (6, 8, [7, 6, 5, 4, 3, 2, 1, 0])]  # the easy-to-miss ones
    for nproc in (int(rng.integers(1, 9)) for _ in range(40)):
        cases.append((int(rng.integers(0, 4 * nproc)), nproc, [int(g) for g in rng.permutation(8)[:nproc]]))
    for rank, nproc, visible in cases:
        got = core.call(fn, what, rank, nproc, list(visible))
        want = reference_placement(rank, nproc, visible)
        core.expect_items(got, 3, f"{what}：要返回三个数 (node, local_rank, physical_gpu)，现在是 {got!r}。")
        for field, g, w in zip(("node", "local_rank", "physical_gpu"), got, want):
            if g != w:
                raise core.CheckFailed(
                    f"rank {rank}，每台机器 {nproc} 个进程，CUDA_VISIBLE_DEVICES="
                    f"{','.join(map(str, visible))}：{field} 应当是 {w}，你的是 {g}。"
                    f"{_explain_placement(field, rank, nproc, visible, g)}"
                )
    core.passed("placement 在几十种 (rank, nproc_per_node, CUDA_VISIBLE_DEVICES) 组合上都对。")


def _join_sum_main(rank, world_size, fn, inputs):
    """Rank function of ex03's :func:`check_join_and_sum`: record the init call, run ``fn``; a group left open is an
    error that :func:`~mgpu_helpers.checks.core.rank_failure` names, as for every checker whose ``fn`` joins."""
    import torch
    import torch.distributed as dist

    with core.WatchedCalls(watch_init=True) as watched:  # the init call recorded under any name
        out = fn(rank, world_size, torch.tensor(inputs[rank]))
    if dist.is_initialized():
        raise RuntimeError("EXERCISE_NOT_LEFT the process group is still up when fn returned")
    inits = [sorted(k for k in init if k != "_args") + ["<positional>"] * len(init["_args"]) for init in watched.inits]
    return core.as_numpy(out), inits


def check_join_and_sum(fn, world_sizes=None, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, x)`` joins through a ``dist.FileStore`` it makes, sums x, leaves, returns the sum."""
    what = "join_and_sum 要自己建 FileStore 加入进程组，all_reduce 之后离开"
    sizes, rng = tuple(world_sizes or (2, 3, 4)), core.new_rng()
    for world_size in sizes:
        length = int(rng.integers(1, 5))
        inputs = [core.int_values(rng, length) for _ in range(world_size)]
        advice = "多半是各 Rank 没在同一个 store 里碰头：FileStore 的路径、world_size 要和大家一致。"
        try:
            values = core.launch(_join_sum_main, world_size, (fn, inputs), what, fn, timeout, advice, init=False)
        except core.CheckFailed as exc:
            # A rank that leaves right after joining can close its connections while a peer is still making
            # them (gloo: "Connection closed by peer"): the usual cause is a missing collective.
            if "Connection closed by peer" not in str(exc) and "connectFullMesh" not in str(exc):
                raise
            raise core.CheckFailed(
                f"{what}：world_size = {world_size} 时，有的 Rank 还在和大家建立连接，另一个 Rank 已经"
                "离开了进程组（gloo 报 Connection closed by peer）。加入之后还要做一次 all_reduce 把各 "
                "Rank 的 x 加起来（它也让每个 Rank 等到大家到齐），再 destroy_process_group()。"
            ) from None
        total = np.sum(inputs, axis=0)
        for rank, (got, _inits) in enumerate(values):
            own = got is not None and np.shape(got) == np.shape(inputs[rank]) and np.allclose(got, inputs[rank])
            hint = "这是这个 Rank 自己的 x：加入进程组之后还要做一次 all_reduce。" if own else ""
            core.compare(got, total, f"world_size = {world_size}，rank {rank}", hint)
        for rank, (_got, inits) in enumerate(values):
            if len(inits) != 1 or "store" not in inits[0] or "init_method" in inits[0]:
                raise core.CheckFailed(
                    f"{what}：rank {rank} 调用 init_process_group 时给的参数是 {inits}。这一题要自己建 "
                    "dist.FileStore(路径, world_size)，用 store= 传进去（再传 rank 和 world_size），"
                    "不用 init_method。"
                )
    core.passed(
        f"join_and_sum 在 world_size = {', '.join(map(str, sizes))} 上用自己建的 FileStore 加入、求和、离开了进程组。"
    )


ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def reference_env_for(
    rank: int, world_size: int, master_port: int, nproc_per_node: int | None = None, master_addr: str = "127.0.0.1"
) -> dict:
    """The variables ``torchrun`` sets for ``rank`` of ``world_size`` processes, ``nproc_per_node`` on each machine
    (default: all on one), meeting at ``master_addr:master_port``: every value a string, as in ``os.environ``."""
    per_node = world_size if nproc_per_node is None else nproc_per_node
    return dict(zip(ENV_KEYS, map(str, (rank, world_size, rank % per_node, per_node, master_addr, master_port))))


def _env_slip(key: str, got: str, want: dict) -> str:
    """Why ``got`` is a wrong value of ``key`` (``want``: the right ones): the typical mistake named where one fits."""
    rank, world_size, per_node = (int(want[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"))
    several = per_node < world_size  # machines
    return {
        "RANK": "rank 从 0 数起，就是这个进程的编号。",
        "WORLD_SIZE": "WORLD_SIZE 是所有机器上进程的总数。",
        "LOCAL_RANK": core.first_hint(
            (got == str(rank) and several, "LOCAL_RANK 是在本机上的编号：每台机器都从 0 数起，不是全局的 rank。"),
            (got == str(rank // per_node), "这是这个 rank 所在机器的编号，不是它在本机上排第几。"),
            default="LOCAL_RANK 是这个 rank 在自己那台机器上排第几（从 0 数起）。",
        ),
        "LOCAL_WORLD_SIZE": core.first_hint(
            (got == str(world_size) and several, "LOCAL_WORLD_SIZE 是本机的进程数，不是所有机器的总数。"),
            default="LOCAL_WORLD_SIZE 是本机的进程数：单机时就是 world_size。",
        ),
        "MASTER_ADDR": core.first_hint(
            (got in LOOPBACK, "MASTER_ADDR 写死成了回环地址：多机时大家要去 master_addr 给的那台机器碰头。"),
            default="MASTER_ADDR 就是给定的 master_addr（默认 127.0.0.1）。",
        ),
        "MASTER_PORT": "所有 rank 要在同一个端口碰头：MASTER_PORT 对每个 rank 都一样，就是给定的端口。",
    }[key]


def check_env_for(fn) -> None:
    """``fn(rank, world_size, master_port, nproc_per_node=None, master_addr="127.0.0.1") -> dict``: six variables."""
    what = "env_for 要给出一个 rank 的六个环境变量"
    # one machine (three arguments, so the defaults are used) and several machines (five)
    rng = core.new_rng()
    addr = f"10.{rng.integers(0, 256)}.{rng.integers(0, 256)}.{rng.integers(1, 255)}"
    cases = [(0, 1, 29500), (3, 4, 29500), (1, 2, 61234)]  # one rank alone; the last rank; another port
    cases += [(13, 16, 29500, 8, addr), (2, 3, 29400, 1, addr)]  # second machine; one process per machine
    cases += [(5, 8, 29400, 4, "127.0.0.1"), (3, 4, 29400, 4, addr)]  # first of machine 1; all on one machine
    for _ in range(30):
        per_node, nodes = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        world_size, port = per_node * nodes, int(rng.integers(20000, 65000))
        rank = int(rng.integers(0, world_size))
        cases.append((rank, world_size, port) if rng.random() < 0.3 else (rank, world_size, port, per_node, addr))
    for case, got in core.answers(fn, what, cases):
        machines = (
            f"，每台机器 {case[3]} 个进程，master_addr = {case[4]!r}" if len(case) > 3 else "（单机，用默认参数）"
        )
        case_text = f"rank {case[0]}，world_size = {case[1]}，MASTER_PORT = {case[2]}{machines}"
        if not isinstance(got, dict):
            raise core.CheckFailed(f"{case_text}：要返回一个 dict（变量名 -> 值），现在是 {type(got).__name__}。")
        if missing := [k for k in ENV_KEYS if k not in got]:
            raise core.CheckFailed(f"{case_text}：少了 {', '.join(missing)}。")
        if odd := [k for k in got if k not in ENV_KEYS]:
            raise core.CheckFailed(f"{case_text}：多了 {', '.join(map(str, odd))}；只要这六个：{', '.join(ENV_KEYS)}。")
        if not_str := [k for k in ENV_KEYS if not isinstance(got[k], str)]:
            raise core.CheckFailed(
                f"{case_text}：{not_str[0]} 的值是 {type(got[not_str[0]]).__name__}（{got[not_str[0]]!r}）。"
                "环境变量的值都是字符串：os.environ 只收字符串，用 str(...)。"
            )
        want = reference_env_for(*case)
        if len(case) == 3 and got["MASTER_ADDR"] in LOOPBACK:
            got = {**got, "MASTER_ADDR": want["MASTER_ADDR"]}  # localhost is as good as 127.0.0.1
        for key in ENV_KEYS:
            if got[key] != want[key]:
                raise core.CheckFailed(
                    f"{case_text}：{key} 应当是 {want[key]!r}，你的是 {got[key]!r}。" + _env_slip(key, got[key], want)
                )
    core.passed(
        "env_for 在几十种 (rank, world_size, MASTER_PORT, 每台机器的进程数, master_addr) 上都给出了 torchrun 会设的六个变量。"
    )


def reference_init_for(rank: int, world_size: int, method: str) -> None:
    """Join the default group through ``method`` ("env://", "tcp://" or "file://") with the course's backend
    (``MGPU_BACKEND``); nccl binds the process to ``cuda:LOCAL_RANK`` first."""
    import torch
    import torch.distributed as dist

    backend = os.environ["MGPU_BACKEND"]
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # this machine's k-th process -> cuda:k
    timeout = timedelta(seconds=30)
    if method == "env://":  # address, port, rank and world size all from the environment
        dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)
        return
    url = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    url = os.environ["MGPU_INIT_METHOD"] if method == "file://" else url
    dist.init_process_group(backend=backend, init_method=url, world_size=world_size, rank=rank, timeout=timeout)


def _init_main(rank, world_size, fn, method):
    """Rank function of :func:`check_init_for`: ``fn``, an all-reduce in its group; (what the group says, inits)."""
    import torch
    import torch.distributed as dist

    with core.WatchedCalls(watch_init=True) as watched:  # the init call recorded under any name
        fn(rank, world_size, method)
    if not dist.is_initialized():
        return None, watched.inits
    bound = torch.cuda.current_device() if dist.get_backend() == "nccl" else None  # before rank_device() sets it
    x = torch.tensor([rank], device=rank_device())
    dist.all_reduce(x)
    seen = dict(rank=dist.get_rank(), world_size=dist.get_world_size(), total=int(x.item()), bound=bound)
    dist.destroy_process_group()
    return seen, watched.inits


def check_init_for(fn, timeout: float = core.HANG_S) -> None:
    """``fn(rank, world_size, method)`` joins through ``method`` itself (env:// on 3 ranks, tcp:// on 2)."""
    what = "init_for 要按 method 自己调用 init_process_group"
    core.require_written(fn, what)
    # first, once under a pretended nccl (BIND_CASE): fn picks cuda:LOCAL_RANK before it joins
    try:
        events = run_ranks(_bind_main, 1, args=(fn,), init=False, timeout=timeout, stream=False, quiet=True).values[0]
    except RankTimeout as exc:  # it never returns, whatever it waits for: say where it waits
        raise core.hang_failure(exc, "init_for", 1, timeout, "init_for 要在限定时间里返回：它在等什么？") from None
    except RankError as exc:
        if core.is_stub_error(exc):
            raise core.not_done(fn, what) from None
        raise core.CheckFailed(
            f"用 nccl、作为 rank {BIND_CASE['RANK']}（LOCAL_RANK={BIND_CASE['LOCAL_RANK']}）运行 init_for "
            f"时出错了（{exc.exc_type}）：{str(exc).splitlines()[0]}"
        ) from None
    if slip := binding_slip(events):
        raise core.CheckFailed(slip)
    for method, world_size in (("env://", 3), ("tcp://", 2)):
        case = f"method = {method!r}，{world_size} 个 rank"
        try:
            res = run_ranks(_init_main, world_size, (fn, method), init=False, timeout=timeout, stream=False, quiet=True)
        except RankTimeout as exc:
            advice = (
                "多半是碰头的地址不对：每个 rank 要去同一个 MASTER_ADDR:MASTER_PORT"
                "（tcp:// 要把这两个写进 URL：tcp://地址:端口）。"
            )
            raise core.hang_failure(exc, case, world_size, timeout, advice) from None
        except RankError as exc:
            if core.is_stub_error(exc):
                raise core.not_done(fn, what) from None
            hint = "。tcp:// 的 URL 里只有地址和端口：rank 和 world_size 要另外传给 init_process_group。"
            about_rank = method == "tcp://" and ("world_size" in str(exc) or "rank" in str(exc).lower())
            first = str(exc).splitlines()[0]
            raise core.CheckFailed(
                f"{case}：rank {exc.rank} 出错了（{exc.exc_type}）：{first}{hint if about_rank else ''}"
            ) from None
        for rank, (seen, inits) in enumerate(res.values):
            if len(inits) != 1:
                raise core.CheckFailed(f"{case}：rank {rank} 调用了 {len(inits)} 次 init_process_group，应当正好一次。")
            args = inits[0]["_args"]  # init_method is the second positional argument
            url = inits[0].get("init_method", args[1] if len(args) > 1 else None)
            not_tcp = method == "tcp://" and not (isinstance(url, str) and url.startswith("tcp://"))
            wrong_group = seen is None or seen["rank"] != rank or seen["world_size"] != world_size
            core.fail_first(
                (
                    method == "env://" and url not in (None, "env://"),
                    f"{case}：rank {rank} 用的 init_method 是 {url!r}。"
                    'env:// 分支要写 init_method="env://"：地址、端口、rank 和 world_size 都从环境变量里读。',
                ),
                (not_tcp, f"{case}：rank {rank} 用的 init_method 是 {url!r}，应当是 tcp://地址:端口。"),
                (wrong_group, f"{case}：rank {rank} 入组后进程组说的是 {seen!r}：rank 或 world_size 不对。"),
                (
                    seen is not None and seen.get("bound") not in (None, rank),
                    f"{case}：nccl 的 rank {rank} 入组后当前 GPU 是 cuda:{seen.get('bound')}，应当是 cuda:{rank}"
                    "（这台机器上的第 LOCAL_RANK 个进程用 cuda:LOCAL_RANK）。",
                ),
            )
    core.passed(
        "init_for 用 env://（3 个 rank）和 tcp://（2 个 rank）都自己入了组，入组后的 rank 和 world_size 也对；"
        "用 nccl 时它在入组之前把进程绑到了 cuda:LOCAL_RANK。"
    )


# One GPU per rank. A rank that joins nccl without choosing its GPU opens its CUDA context on cuda:0, and so does
# every other rank of the machine: their contexts and allocations pile up on one GPU. The reader's init_for is run
# once as rank 5 of 8 (4 per machine: LOCAL_RANK 1) under a pretended nccl, with torch.cuda.set_device and
# dist.init_process_group replaced by recorders, so that this is checked on a machine without GPUs too.

BIND_CASE = dict(RANK="5", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4", MGPU_BACKEND="nccl")
BIND_CASE |= dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", MGPU_INIT_METHOD="file:///nonexistent/store")


def _device_index(device):
    """The GPU index of a set_device / device_id argument (an int, "cuda:k", a torch.device), or None."""
    import torch

    if isinstance(device, str):
        device = torch.device(device)
    return device.index if isinstance(device, torch.device) else (int(device) if device is not None else None)


def _bind_main(rank, world_size, fn):
    """Rank function of :func:`check_init_for`'s binding check: ``fn(5, 8, "env://")`` under BIND_CASE; returns the
    events, in order: ("set_device", k) and ("init", device_id index or None)."""
    from unittest import mock

    import torch
    import torch.distributed as dist

    events = []
    os.environ.update(BIND_CASE)
    with (
        mock.patch.object(torch.cuda, "set_device", lambda d: events.append(("set_device", _device_index(d)))),
        mock.patch.object(
            dist, "init_process_group", lambda *a, **k: events.append(("init", _device_index(k.get("device_id"))))
        ),
        mock.patch.object(torch.cuda, "is_available", lambda: True),
        mock.patch.object(torch.cuda, "device_count", lambda: int(BIND_CASE["LOCAL_WORLD_SIZE"])),
    ):
        fn(int(BIND_CASE["RANK"]), int(BIND_CASE["WORLD_SIZE"]), "env://")
    return events


def binding_slip(events) -> str:
    """What is wrong with how a rank bound itself to its GPU (``events`` from :func:`_bind_main`), or ""."""
    local, rank = int(BIND_CASE["LOCAL_RANK"]), int(BIND_CASE["RANK"])
    inits = [i for i, (kind, _d) in enumerate(events) if kind == "init"]
    if not inits:
        return ""  # no init at all: the launch in check_init_for says so
    chosen = [d for _kind, d in events[: inits[0] + 1] if d is not None]  # set_device calls, then device_id=
    case = (
        f"用 nccl、作为第二台机器上的 rank {rank}（每台 {BIND_CASE['LOCAL_WORLD_SIZE']} 个进程，"
        f"LOCAL_RANK={local}）运行 init_for 时，"
    )
    picked = chosen[-1] if chosen else None
    return core.first_hint(
        (
            not chosen and any(kind == "set_device" for kind, _d in events[inits[0] :]),
            case + "torch.cuda.set_device 在 init_process_group 之后才调用。要在入组之前选好 GPU："
            "入组时 nccl 就要知道这个进程用哪块卡，之前已经碰过 CUDA 的代码会落在 cuda:0 上。",
        ),
        (
            not chosen,
            case + "没有选 GPU：既没有 torch.cuda.set_device，也没有 device_id=。这样机器上每个 rank 都在 cuda:0 上"
            "建 CUDA 上下文、分配显存——一块卡的显存被挤爆、其他卡闲着。",
        ),
        (picked == local, ""),
        (picked == 0, case + "选的是 cuda:0：每个 rank 都选 cuda:0，大家就挤在同一块卡上。要按 LOCAL_RANK 选。"),
        (
            picked == rank,
            case + f"选的是 cuda:{rank}，用了全局 rank：这台机器只有 cuda:0 到 cuda:"
            f"{int(BIND_CASE['LOCAL_WORLD_SIZE']) - 1}。GPU 按本机上的编号 LOCAL_RANK 选。",
        ),
        default=case + f"选的是 cuda:{picked}，应当是 cuda:{local}（本机上的第 LOCAL_RANK 个进程用 cuda:LOCAL_RANK）。",
    )


try_env_for = core.fill_in_cell(check_env_for, reference_env_for, "env_for")
try_init_for = core.fill_in_cell(check_init_for, reference_init_for, "init_for")

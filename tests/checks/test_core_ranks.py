"""Launching a check on ranks (mgpu_helpers.checks.core.ranks): an answer that never ends is reported within
seconds by every checker that launches ranks, naming each rank's call and the learner's line it waits on
(the launcher's one reading of a rank's stack); the next check in the same process still works."""

import re
import time

import numpy as np
import pytest
from learner_code import by_value, warm_ranks

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import collectives, dataparallel, groups, overlap, p2p, semantics  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed, launch_check  # noqa: E402

ALL_REDUCE = """
    import torch.distributed as dist
    def f(rank, world_size, x):
        dist.all_reduce(x)
        return x"""


@pytest.fixture(autouse=True, scope="module")
def _warm():
    warm_ranks()


DEADLOCKS = {
    "p2p.check_exchange": (
        p2p.check_exchange,
        """
        def answer(send_buf, dst, recv_buf, src, group=None):
            import torch.distributed as dist
            dist.send(send_buf, dst)              # every rank sends first: a cycle of waits
            dist.recv(recv_buf, src)
            return []""",
        {"world_sizes": (3,)},
        r"rank 0 卡在 dist\.send（answer 的第 4 行）",
    ),
    "p2p.check_pass_right": (
        p2p.check_pass_right,
        """
        def answer(rank, world_size, x):
            import torch, torch.distributed as dist
            got = torch.empty_like(x)
            dist.recv(got, (rank - 1) % world_size)     # every rank receives first
            dist.send(x, (rank + 1) % world_size)
            return got""",
        {"world_sizes": (2,)},
        r"rank 1 卡在 dist\.recv（answer 的第 5 行）",
    ),
    "collectives.check_broadcast": (
        collectives.check_broadcast,
        """
        def answer(rank, world_size, x, src):
            import torch.distributed as dist
            dist.recv(x, (rank + 1) % world_size)        # a receive nobody sends to
            return x""",
        {"world_sizes": (2,)},
        r"rank 0 卡在 dist\.recv",
    ),
    "collectives.check_ring_all_reduce": (
        collectives.check_ring_all_reduce,
        """
        def answer(rank, world_size, x):
            import torch.distributed as dist
            dist.send(x, (rank - 1) % world_size)
            dist.recv(x, (rank + 1) % world_size)
            return x""",
        {"world_sizes": (3,)},
        r"rank 2 卡在 dist\.send",
    ),
    "semantics.check_reduce_scatter_uneven": (
        semantics.check_reduce_scatter_uneven,
        """
        def answer(rank, world_size, x, sizes):
            import torch.distributed as dist
            if rank == 0:
                dist.reduce(x, dst=0)                  # the other ranks never join this reduce
            return x[:sizes[rank]]""",
        {"world_sizes": (2,)},
        r"rank 0 卡在 dist\.reduce",
    ),
    "dataparallel.check_data_parallel_step": (
        dataparallel.check_data_parallel_step,
        """
        def answer(model, optimizer, x, y, world_size):
            import torch.distributed as dist
            if dist.get_rank() == 1:
                while True:                             # never ends
                    pass
            """,
        {"world_sizes": (2,)},
        r"rank 1 卡在 （不在 torch\.distributed 调用里，像是死循环）（answer 的第 \d 行）",
    ),
}


DEADLOCKS["overlap.check_overlap_dp"] = (
    overlap.check_overlap_dp,
    """
    import torch.distributed as dist
    class answer:
        def __init__(self, model, world_size, optimizer):
            self.params, self.world_size, self.optimizer = list(model.parameters()), world_size, optimizer
            self.pending = []
            for p in self.params:
                p.register_post_accumulate_grad_hook(self.on_grad_ready)
        def on_grad_ready(self, p):
            if dist.get_rank() == 0:           # only rank 0 reduces: rank 1 never joins
                self.pending.append(dist.all_reduce(p.grad, async_op=True))
        def step(self):
            for work in self.pending:
                work.wait()
            self.pending.clear()
            dist.barrier()
            self.optimizer.step()
    """,
    {},
    r"rank \d 卡在",
)
DEADLOCKS["groups.check_join_and_sum"] = (
    groups.check_join_and_sum,
    """
    def answer(rank, world_size, x):
        import os, tempfile
        import torch.distributed as dist
        path = os.path.join(tempfile.gettempdir(), f"mine-{os.getpid()}")   # a different file on every rank
        dist.init_process_group("gloo", store=dist.FileStore(path, world_size), rank=rank, world_size=world_size)
        dist.all_reduce(x)
        dist.destroy_process_group()
        return x
    """,
    {"world_sizes": (2,)},
    r"rank \d 卡在.*answer 的第 \d 行",
)


@pytest.mark.parametrize("name", list(DEADLOCKS))
def test_an_answer_that_never_ends_is_reported_within_seconds(name):
    check, source, kwargs, where = DEADLOCKS[name]
    start = time.monotonic()
    with pytest.raises(CheckFailed, match=r"过了 [\d.]+ 秒还没有结束") as info:
        check(by_value(source, "answer"), **kwargs)
    assert time.monotonic() - start < 15, "the hang should be reported within seconds"
    assert re.search(where, str(info.value)), str(info.value)
    # the kernel session stays usable: the next check runs and passes
    launch_check(by_value(ALL_REDUCE, "f"), "求和", 2, [np.ones(2), np.ones(2)])


def test_joining_checkers_report_a_wrong_meeting_point_within_seconds():
    never = by_value(
        """
        def init_for(rank, world_size, method):
            import time
            time.sleep(600)                       # never joins""",
        "init_for",
    )
    start = time.monotonic()
    with pytest.raises(CheckFailed, match=r"过了 [\d.]+ 秒还没有结束.*rank \d 卡在.*init_for 的第 4 行"):
        groups.check_init_for(never)
    assert time.monotonic() - start < 15

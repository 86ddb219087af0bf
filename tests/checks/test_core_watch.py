"""Watching torch.distributed in a rank (mgpu_helpers.checks.core.watch): a forbidden call is caught under any
name or import path, the allowed ones run and are recorded (each message once, with its bytes), watchers nest,
and a recorded call is named as the learner wrote it."""

import numpy as np
import pytest
from learner_code import by_value, warm_ranks

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks.core import HANG_S, SENDS, CheckFailed, WatchedCalls, launch_check  # noqa: E402
from mgpu_helpers.checks.core.watch import DistCall, call_label, refuse_calls  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _warm():
    warm_ranks()


PATHS = {
    "dist.all_reduce": """
        import torch.distributed as dist
        def f(rank, world_size, x):
            dist.all_reduce(x)
            return x""",
    "torch.distributed.all_reduce": """
        import torch
        def f(rank, world_size, x):
            torch.distributed.all_reduce(x)
            return x""",
    "imported by name at the top (a reference travelling by pickle)": """
        from torch.distributed import all_reduce
        def f(rank, world_size, x):
            all_reduce(x)
            return x""",
    "distributed_c10d.all_reduce": """
        def f(rank, world_size, x):
            import torch.distributed.distributed_c10d as c10d
            c10d.all_reduce(x)
            return x""",
    "an alias": """
        import torch.distributed as dist
        add_up = dist.all_reduce
        def f(rank, world_size, x):
            add_up(x)
            return x""",
    "a helper of the learner's": """
        from torch.distributed import all_reduce as ar
        def helper(t):
            ar(t)
        def f(rank, world_size, x):
            helper(x)
            return x""",
    "a name computed at run time": """
        import torch.distributed as dist
        def f(rank, world_size, x):
            getattr(dist, "all_" + "reduce")(x)
            return x""",
}


@pytest.mark.parametrize("source", list(PATHS.values()), ids=list(PATHS))
def test_a_forbidden_collective_is_caught_under_any_name(source):
    with pytest.raises(CheckFailed, match=r"不能直接调用 dist\.all_reduce"):
        launch_check(by_value(source, "f"), "求和", 2, [np.ones(3), np.ones(3)], forbid=("all_reduce",))


def test_allowed_calls_still_run_and_are_recorded():
    f = by_value(
        """
        from torch.distributed import all_reduce as ar
        def f(rank, world_size, x):
            import torch.distributed as dist
            ar(x)
            dist.send(x, (rank + 1) % world_size) if rank == 0 else dist.recv(x, 0)
            return x""",
        "f",
    )
    out = launch_check(f, "求和", 2, [np.ones(3), 2 * np.ones(3)], forbid=("broadcast",))
    assert np.allclose(out[0], 3) and np.allclose(out[1], 3)


def _calls_main(rank, world_size, fn):
    import torch

    with WatchedCalls() as watched:
        fn(rank, world_size, torch.arange(5, dtype=torch.float32))
    return list(watched.calls)


def test_watched_calls_count_each_message_once_with_its_bytes():
    f = by_value(
        """
        import torch
        import torch.distributed as dist
        from torch.distributed import isend as post
        def f(rank, world_size, x):
            if rank == 0:
                dist.send(x, 1)                         # torch's send uses isend inside: counted once
                post(x[:2], 1).wait()
                ops = [dist.P2POp(dist.isend, x[:3], 1)]
                for r in dist.batch_isend_irecv(ops):
                    r.wait()
            else:
                dist.recv(x, 0)
                dist.recv(x[:2], 0)
                dist.recv(x[:3], 0)""",
        "f",
    )
    calls = mh.run_ranks(_calls_main, 2, args=(f,), timeout=HANG_S, stream=False, quiet=True).values
    sends = [(c.name, c.peer, c.nbytes) for c in calls[0] if c.name in SENDS]
    assert sends == [("dist.send", 1, 20), ("dist.isend", 1, 8), ("batch:isend", 1, 12)]
    assert [c.name for c in calls[1]] == ["dist.recv"] * 3


def _nested_main(rank, world_size):
    import torch
    import torch.distributed as dist

    x = torch.ones(3)
    with WatchedCalls() as outer:
        with WatchedCalls(refuse=("broadcast",)) as inner:
            dist.all_reduce(x)
        dist.all_reduce(x)
    return [c.name for c in outer.calls], [c.name for c in inner.calls], float(x[0])


def test_watchers_nest():
    values = mh.run_ranks(_nested_main, 2, timeout=HANG_S, stream=False, quiet=True).values
    assert values[0] == (["dist.all_reduce", "dist.all_reduce"], ["dist.all_reduce"], 4.0)


def test_a_batched_operation_is_named_as_the_learner_wrote_it():
    assert call_label("batch:irecv") == "dist.batch_isend_irecv 里的 irecv"
    assert call_label("dist.send") == "dist.send"
    with pytest.raises(CheckFailed, match="调用了 dist.batch_isend_irecv 里的 isend") as info:
        refuse_calls([[], [DistCall("batch:isend", 0, 3)]], ("isend",), "pass_right", "只许用阻塞调用。")
    assert "batch:" not in str(info.value)

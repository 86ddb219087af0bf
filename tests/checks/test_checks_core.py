"""The checkers' shared rules (mgpu_helpers.checks.core): a forbidden torch.distributed call is caught under any
name or import path, the course's own code and a checker's reference are refused however they are reached,
and an answer that never ends is reported within seconds, naming the rank and the call, by every checker
that launches ranks; the next check in the same process still works."""

import textwrap
import time

import numpy as np
import pytest

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import collectives, core, dataparallel, groups, overlap, p2p, semantics  # noqa: E402
from mgpu_helpers.checks.core import CheckFailed, course_code, watch  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def warm_ranks():
    """The rank server up before the clocks start, forked by the fork server with what the optimizers need
    (torch._dynamo) imported, as in a notebook: so the first check does not pay for a cold start."""
    from mgpu_helpers.launcher import launch

    launch.prewarm(wait=True)
    launch.run_ranks(lambda r, world_size: r, 3, backend="gloo", timeout=120, stream=False, quiet=True)


def _by_value(source: str, name: str):
    """A function defined from source text, travelling to ranks by value (like one defined in a cell)."""
    ns = {"__name__": "learner_cell"}
    exec(textwrap.dedent(source), ns)
    return ns[name]


# -- a forbidden call, under every name it can be reached by ---------------------------------------------------

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
        core.launch_check(_by_value(source, "f"), "求和", 2, [np.ones(3), np.ones(3)], forbid=("all_reduce",))


def test_allowed_calls_still_run_and_are_recorded():
    f = _by_value(
        """
        from torch.distributed import all_reduce as ar
        def f(rank, world_size, x):
            import torch.distributed as dist
            ar(x)
            dist.send(x, (rank + 1) % world_size) if rank == 0 else dist.recv(x, 0)
            return x""",
        "f",
    )
    out = core.launch_check(f, "求和", 2, [np.ones(3), 2 * np.ones(3)], forbid=("broadcast",))
    assert np.allclose(out[0], 3) and np.allclose(out[1], 3)


def _calls_main(rank, world_size, fn):
    import torch

    with core.WatchedCalls() as watched:
        fn(rank, world_size, torch.arange(5, dtype=torch.float32))
    return list(watched.calls)


def test_watched_calls_count_each_message_once_with_its_bytes():
    f = _by_value(
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
    calls = mh.run_ranks(_calls_main, 2, args=(f,), timeout=core.HANG_S, stream=False, quiet=True).values
    sends = [(c.name, c.peer, c.nbytes) for c in calls[0] if c.name in core.SENDS]
    assert sends == [("dist.send", 1, 20), ("dist.isend", 1, 8), ("batch:isend", 1, 12)]
    assert [c.name for c in calls[1]] == ["dist.recv"] * 3


# -- the course's own code and the checker's reference ---------------------------------------------------------


def test_the_course_code_under_an_alias_is_refused_before_the_run():
    f = _by_value(
        """
        import mgpu_helpers as mh
        borrowed = mh.lessons.p2p.exchange
        def exchange(send_buf, dst, recv_buf, src, group=None):
            return borrowed(send_buf, dst, recv_buf, src, group)""",
        "exchange",
    )
    assert "mh.lessons.p2p.exchange" in core.course_code_reached(f, [mh.lessons.p2p.exchange])
    with pytest.raises(CheckFailed, match=r"课程自己的 mh\.lessons\.p2p\.exchange（你的代码里叫 borrowed）"):
        p2p.check_exchange(f, world_sizes=(2,))


@pytest.mark.parametrize(
    "source",
    [
        """
    import mgpu_helpers as mh
    def f(x):
        return mh.lessons.ring.ring_all_reduce(x)""",
        """
    def f(x):
        from mgpu_helpers.lessons.ring import ring_all_reduce as mine
        return mine(x)""",
        """
    def f(x):
        import mgpu_helpers.lessons.ring as r
        return r.ring_all_reduce(x)""",
        """
    from mgpu_helpers.lessons import ring
    def helper(t):
        return ring.ring_all_reduce(t)
    def f(x):
        return helper(x)""",
    ],
    ids=["module path", "imported inside", "module alias", "through a helper"],
)
def test_the_course_code_is_found_by_any_path(source):
    from mgpu_helpers.lessons import ring

    assert core.course_code_reached(_by_value(source, "f"), [ring.ring_all_reduce]) is not None


def test_the_course_code_reached_only_at_run_time_is_refused_in_the_ranks():
    f = _by_value(
        """
        import mgpu_helpers as mh
        def exchange(send_buf, dst, recv_buf, src, group=None):
            lesson = getattr(mh.lessons, "p" + "2p")         # invisible to reading the code
            return getattr(lesson, "exch" + "ange")(send_buf, dst, recv_buf, src, group)""",
        "exchange",
    )
    assert core.course_code_reached(f, [mh.lessons.p2p.exchange]) is None
    with pytest.raises(CheckFailed, match=r"rank \d 调用了课程自己的 mh\.lessons\.p2p\.exchange"):
        p2p.check_exchange(f, world_sizes=(2,))


def test_the_checker_reference_is_refused():
    with pytest.raises(CheckFailed, match="课程自己的 mh.checks.semantics.reference_all_gather_uneven"):
        semantics.check_all_gather_uneven(semantics.reference_all_gather_uneven, world_sizes=(2,))
    wrapped = _by_value(
        """
        from mgpu_helpers.checks.semantics import reference_all_gather_uneven as ref
        def mine(rank, world_size, x):
            return ref(rank, world_size, x)""",
        "mine",
    )
    with pytest.raises(CheckFailed, match="课程自己的 .*reference_all_gather_uneven（你的代码里叫 ref）"):
        semantics.check_all_gather_uneven(wrapped, world_sizes=(2,))


def test_a_helper_of_the_learners_with_a_course_like_name_is_not_refused():
    f = _by_value(
        """
        def ring_all_reduce(x):          # the learner's own, same name as the course's
            return x
        def f(x):
            return ring_all_reduce(x)""",
        "f",
    )
    from mgpu_helpers.lessons import ring

    assert core.course_code_reached(f, [ring.ring_all_reduce], packages=core.COURSE_PACKAGES) is None


def test_in_process_refusal_lets_the_checker_reference_through():
    from mgpu_helpers.lessons import cost_model

    hidden = [cost_model.ring_allreduce_seconds]

    def sneaky(*args):
        return hidden[0](*args)  # not visible by name

    with (
        pytest.raises(CheckFailed, match="课程自己的 ring_allreduce_seconds"),
        course_code.refusing_course_code(sneaky, "t", [(cost_model, "ring_allreduce_seconds")]),
    ):
        sneaky(1, 2, 3e-6, 1e-9)
    assert cost_model.ring_allreduce_seconds(1, 1, 1.0, 1.0) == 0  # the code is put back


# -- an answer that never ends: reported within seconds, the rank and call named, the next check works -------

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
            self.params, self.world_size, self.optimizer, self.pending = list(model.parameters()), world_size, optimizer, []
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
        check(_by_value(source, "answer"), **kwargs)
    assert time.monotonic() - start < 15, "the hang should be reported within seconds"
    assert __import__("re").search(where, str(info.value)), str(info.value)
    # the kernel session stays usable: the next check runs and passes
    core.launch_check(_by_value(PATHS["dist.all_reduce"], "f"), "求和", 2, [np.ones(2), np.ones(2)])


def test_joining_checkers_report_a_wrong_meeting_point_within_seconds():
    never = _by_value(
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


# -- edge cases are in every run, not left to chance ----------------------------------------------------------


def test_every_broadcast_run_has_a_source_other_than_rank_0_and_a_zero():
    rng = core.new_rng()
    for _ in range(20):
        for world_size in (2, 3):
            inputs, (src,) = collectives._broadcast_case(rng, world_size)
            assert src != 0 and (inputs[src] == 0).any()


def test_a_broadcast_that_always_sends_from_rank_0_is_rejected_every_time():
    from_zero = _by_value(
        """
        def answer(rank, world_size, x, src):
            import torch.distributed as dist
            if rank == 0:
                for r in range(1, world_size):
                    dist.send(x, r)
            else:
                dist.recv(x, 0)
            return x""",
        "answer",
    )
    with pytest.raises(CheckFailed, match=r"src = [12]，rank \d"):
        collectives.check_broadcast(from_zero, world_sizes=(2, 3))


def test_every_point_to_point_run_has_zeros_in_the_data():
    rng = core.new_rng()
    for _ in range(20):
        for _world_size, _dtype, inputs in p2p._rank_fn_cases(rng, (2, 3, 4)):
            assert (inputs[0] == 0).any()


def test_every_uneven_all_gather_run_has_an_empty_piece():
    refuses_empty = _by_value(
        """
        def answer(rank, world_size, x):
            if x.numel() == 0:
                raise ValueError("empty piece")
            return x""",
        "answer",
    )
    with pytest.raises(CheckFailed, match=r"rank \d 出错了（ValueError）：.*empty piece"):
        semantics.check_all_gather_uneven(refuses_empty, world_sizes=(3,))


def _nested_main(rank, world_size):
    import torch
    import torch.distributed as dist

    x = torch.ones(3)
    with core.WatchedCalls() as outer:
        with core.WatchedCalls(refuse=("broadcast",)) as inner:
            dist.all_reduce(x)
        dist.all_reduce(x)
    return [c.name for c in outer.calls], [c.name for c in inner.calls], float(x[0])


def test_watchers_nest():
    values = mh.run_ranks(_nested_main, 2, timeout=core.HANG_S, stream=False, quiet=True).values
    assert values[0] == (["dist.all_reduce", "dist.all_reduce"], ["dist.all_reduce"], 4.0)


# -- one rule for the course's own code, at run time; a failed check shows as its message -------------------


def _ranges_from_shards(n, ws):
    """A wrong answer: the course's ``shard`` (which calls the course's contiguous_ranges) does the splitting."""
    from mgpu_helpers.lessons import sharding_rules as rules

    out = []
    for r in range(ws):
        mine = rules.shard(range(n), r, ws)
        out.append(
            range(mine[0], mine[-1] + 1) if mine else range(out[-1].stop if out else 0, out[-1].stop if out else 0)
        )
    return out


def _own_ranges(n, ws):
    """A correct answer written its own way: the first n % ws ranks take one more."""
    bounds = [0]
    for r in range(ws):
        bounds.append(bounds[-1] + n // ws + (r < n % ws))
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def test_the_course_version_is_refused_whatever_path_reaches_it(capsys):
    from mgpu_helpers.checks import sharding
    from mgpu_helpers.lessons.sharding_rules import contiguous_ranges as split  # an import alias

    def by_alias(n, ws):
        return split(n, ws)

    def wrapped(n, ws):  # the learner's own wrapper around the course's function
        return by_alias(n, ws)

    wrong = {
        "an alias of the reference": by_alias,
        "the learner's wrapper around it": wrapped,
        "a course function that calls the reference": _ranges_from_shards,
    }
    for fn in wrong.values():
        with pytest.raises(CheckFailed, match="课程自己的"):
            sharding.try_contiguous_ranges(fn)
    assert sharding.try_contiguous_ranges(_own_ranges) is _own_ranges
    assert "通过" in capsys.readouterr().out


def test_the_checker_may_still_use_its_reference_while_the_learners_code_is_refused(capsys):
    from mgpu_helpers.checks import sharding
    from mgpu_helpers.lessons import sharding_rules as rules

    def own_then_course(n, ws):
        rules.contiguous_ranges(2, 1)  # the learner's call: refused
        return _own_ranges(n, ws)

    with course_code.refusing_course_code(_own_ranges, "split", [rules.contiguous_ranges]):
        sharding.check_contiguous_ranges(_own_ranges)  # the checker computes its expected values with it
        with pytest.raises(CheckFailed, match="课程自己的 contiguous_ranges"):
            sharding.check_contiguous_ranges(own_then_course)
    assert "通过" in capsys.readouterr().out
    assert rules.contiguous_ranges(5, 2) == [range(3), range(3, 5)]  # the code is put back


def test_a_failed_check_shows_in_ipython_as_its_message_and_the_trace_on_request():
    # In a process of its own: an IPython shell alive in this one would turn tqdm.auto into notebook bars.
    import subprocess
    import sys

    script = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance(colors="nocolor")
        shell.run_cell("from mgpu_helpers.checks.core import CheckFailed\\n"
                       "def check():\\n    raise CheckFailed('n = 7：第 6 个元素没有写到')\\ncheck()")
        print("=====")
        shell.run_cell("import mgpu_helpers as mh\\nmh.checks.show_trace()")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    shown, trace = (run.stdout + run.stderr).split("=====")
    assert "检查没有通过" in shown and "n = 7：第 6 个元素没有写到" in shown and "mh.checks.show_trace()" in shown
    assert "Traceback" not in shown and "def check" not in shown and "core.py" not in shown
    assert "Traceback" in trace and "check()" in trace


def test_a_numpy_integer_is_a_rank_and_a_bool_is_not():
    assert core.is_rank_number(np.argmin([3.0, 1.0, 2.0])) and core.is_rank_number(2)
    assert not any(core.is_rank_number(v) for v in (True, np.bool_(False), 1.0, "1", None))


def test_a_batched_operation_is_named_as_the_learner_wrote_it():
    assert core.call_label("batch:irecv") == "dist.batch_isend_irecv 里的 irecv"
    assert core.call_label("dist.send") == "dist.send"
    with pytest.raises(CheckFailed, match="调用了 dist.batch_isend_irecv 里的 isend") as info:
        core.refuse_calls([[], [watch.DistCall("batch:isend", 0, 3)]], ("isend",), "pass_right", "只许用阻塞调用。")
    assert "batch:" not in str(info.value)


def test_the_course_models_and_widgets_are_refused_to_a_fill_in_however_they_are_reached():
    from mgpu_helpers.checks import collectives
    from mgpu_helpers.models.bandwidth import busbw as course_busbw  # an import alias

    def by_model(nbytes, seconds, world_size):
        return mh.models.bandwidth.busbw("all_reduce", nbytes, seconds, world_size)

    def by_alias(nbytes, seconds, world_size):
        return course_busbw("all_reduce", nbytes, seconds, world_size)

    def helper(nbytes, seconds, world_size):
        return by_alias(nbytes, seconds, world_size)

    def wrapped(nbytes, seconds, world_size):  # the learner's wrapper around it
        return helper(nbytes, seconds, world_size)

    for fn in (by_model, by_alias, wrapped):
        with pytest.raises(CheckFailed, match="课程自己的 mh.models.bandwidth.busbw"):
            collectives.try_all_reduce_busbw(fn)

    def own(nbytes, seconds, world_size):
        return nbytes / seconds * 2 * (world_size - 1) / world_size

    assert collectives.try_all_reduce_busbw(own) is own
    assert mh.models.bandwidth.busbw("all_reduce", 8, 1.0, 2) == 8.0  # the guard is gone afterwards


def test_an_exercise_check_refuses_the_course_models_too():
    def by_model(strategy, capacity, params, grads, optimizer, activations):  # 06's memory model asked instead,
        model = getattr(mh.models.memory, "memory" + "_plan")  # by a name no reading finds
        for n in range(1, 65):
            plan = model(strategy, n, capacity, params, grads, optimizer, activations)
            if plan.fits:
                return n
        return None

    with pytest.raises(CheckFailed, match="课程自己的 mh.models.memory.memory_plan"):
        mh.checks.check_rank_memory_fewest_gpus(by_model)
    assert mh.checks.check_rank_memory_fewest_gpus.__name__ == "check_rank_memory_fewest_gpus"


def test_an_exercise_check_stays_guarded_on_every_lookup():
    first, second = mh.checks.check_rank_memory_fewest_gpus, mh.checks.check_rank_memory_fewest_gpus
    assert first is second and hasattr(second, "__wrapped__")  # the guarded check, not the cached bare one

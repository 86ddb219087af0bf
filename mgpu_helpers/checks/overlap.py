"""Checkers of notebook 13 and ex13. The learner's classes run inside :func:`mgpu_helpers.lessons.overlap.train_rank`
on 2 and 3 ranks, and each rank watches what the code does (:func:`_watch`), not only what it computes: every
collective under any name, and whether each async one was waited on before ``optimizer.step()``."""

import contextlib
import random

import numpy as np

from mgpu_helpers.checks import core
from mgpu_helpers.models.collectives import TORCH_FUNCTIONS

LESSON = "mgpu_helpers.lessons.overlap"
WIDTHS = (7, 12, 5, 3)
NUMELS = [n for a, b in zip(WIDTHS, WIDTHS[1:]) for n in (a * b, b)]  # 84, 12, 60, 5, 15, 3: uneven on purpose
STEPS, ROWS_PER_RANK, LR = 3, 2, 0.05
#: The calls the checker records: the seven collectives in every form torch has, and ``all_to_all_single``.
WATCHED_OPS = (*(function for forms in TORCH_FUNCTIONS.values() for function in forms), "all_to_all_single")
WORLD_SIZES = (2, 3)
SEEN = ("calls", "unwaited_at_step", "order")  # what a rank sends back of what _watch saw


COURSE_NAMES = ("NaiveDP", "OverlapDP", "BucketDP", "Zero1", "plan_buckets", "overlap_fraction")
# What each class's cell asks for (a function's cell: the function itself).
METHODS = {"OverlapDP": ("on_grad_ready", "step"), "BucketDP": ("on_grad_ready", "step"), "Zero1": ("step",)}
METHODS["AccumulateDP"] = ("no_sync", "on_grad_ready", "step")


def _start(obj, what: str) -> None:
    """Before anything runs: a stub is not done yet; the course's classes and mh.lessons / mh.checks are refused."""
    core.require_written(obj, what)
    course = [getattr(core.course_object(LESSON), n, None) for n in COURSE_NAMES]
    advice = f"把 {', '.join(METHODS.get(what, (what,)))} 补全在你的单元格里。"
    core.refuse_course_code(obj, what, course, packages=core.COURSE_PACKAGES, advice=advice)


class _WorkProxy:
    """A Work handle that remembers whether anybody waited on it."""

    def __init__(self, work, index, seen):
        self._work, self._index, self._seen = work, index, seen

    def __getattr__(self, name):
        attr = getattr(self._work, name)
        if name not in ("wait", "get_future"):
            return attr

        def waited(*args, **kwargs):  # the handle is waited on (or its future taken)
            self._seen["waited"].add(self._index)
            return attr(*args, **kwargs)

        return waited


def _watch():
    """Watch this rank's collectives, ``Tensor.backward`` and the optimizers' ``step``: ``calls`` (op, elements,
    async, issued during backward, step index), ``order`` (collectives and optimizer steps in sequence),
    ``unwaited_at_step`` (async collectives not yet waited on when a step ran)."""
    import torch

    seen = {"calls": [], "order": [], "waited": set(), "async": set(), "in_backward": False, "step": 0}
    seen["unwaited_at_step"] = 0  # summed over the steps

    def seen_call(call, work):  # an async Work handle comes back wrapped
        op = call.name.split(".")[-1]
        if op not in WATCHED_OPS:
            return work
        index, numels = len(seen["calls"]), call.numels
        big = numels[1] if op in ("all_gather_into_tensor", "reduce_scatter_tensor") and len(numels) > 1 else numels[0]
        seen["calls"].append((op, big or 0, call.async_op, seen["in_backward"], seen["step"]))
        seen["order"].append(op)
        if call.async_op and work is not None:
            seen["async"].add(index)
            return _WorkProxy(work, index, seen)
        return work

    core.WatchedCalls(on_call=seen_call).__enter__()  # left in place: the rank ends after the run

    def watched_backward(self, *args, _backward=torch.Tensor.backward, **kwargs):
        seen["in_backward"] = True
        try:
            return _backward(self, *args, **kwargs)
        finally:
            seen["in_backward"] = False

    torch.Tensor.backward = watched_backward

    for opt_cls in (torch.optim.SGD, torch.optim.Adam):

        def watched_step(self, *args, _step=opt_cls.step, **kwargs):
            seen["unwaited_at_step"] += len(seen["async"] - seen["waited"])
            seen["order"].append("optimizer.step")
            seen["step"] += 1
            return _step(self, *args, **kwargs)

        opt_cls.step = watched_step
    return seen


def watched_train(rank, world_size, cls, train_kwargs):
    """Rank function: :func:`~mgpu_helpers.lessons.overlap.train_rank` with the learner's ``cls``, watched."""
    seen = _watch()
    out = core.course_object(LESSON).train_rank(rank, world_size, cls, record=False, **train_kwargs)
    return {"params": out["params"].numpy(), "state_bytes": out["state_bytes"]} | {k: seen[k] for k in SEEN}


def watched_accumulate(rank, world_size, cls, micro_batches, train_kwargs):
    """Rank function: gradient accumulation, watched. Each step's rows are cut into ``micro_batches``; all but the
    last run their backward inside ``sync.no_sync()``; each loss is divided by ``micro_batches``."""
    import torch

    lesson, seen = core.course_object(LESSON), _watch()
    widths, rows = train_kwargs["widths"], train_kwargs["rows_per_rank"]
    model = lesson.make_model(widths)
    sync = cls(model, world_size, torch.optim.SGD(model.parameters(), lr=train_kwargs["lr"]))
    no_sync_calls = 0
    for step in range(train_kwargs["steps"]):
        x, y = lesson.make_batch(widths, rows * world_size, step)
        x, y = x[rank * rows : (rank + 1) * rows], y[rank * rows : (rank + 1) * rows]
        for p in model.parameters():
            p.grad = None
        for k, (xm, ym) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches))):
            loss = torch.nn.functional.mse_loss(model(xm), ym) / micro_batches
            if k < micro_batches - 1:
                before = len(seen["calls"])
                with sync.no_sync():
                    loss.backward()
                no_sync_calls += len(seen["calls"]) - before
            else:
                loss.backward()
        sync.step()
    params = lesson.flat_params(model).numpy()
    # Syncing must come back on however no_sync() ends: after an error inside it, a backward communicates again.
    with contextlib.suppress(_Probe), sync.no_sync():
        raise _Probe()
    before = len(seen["calls"])
    torch.nn.functional.mse_loss(model(x), y).backward()
    resumed = len(seen["calls"]) > before
    sync.step()
    return dict(params=params, no_sync_calls=no_sync_calls, resumed_after_error=resumed) | {k: seen[k] for k in SEEN}


class _Probe(Exception):
    """Raised inside the learner's ``no_sync()`` to see that syncing comes back after an error."""


def _run(cls, world_size, what, rank_fn=watched_train, extra=(), **train_kwargs):
    """``rank_fn(rank, world_size, cls, *extra, kwargs)`` on ranks; returns the values and ``kwargs``."""
    kwargs = dict(steps=STEPS, widths=WIDTHS, rows_per_rank=ROWS_PER_RANK, lr=LR) | train_kwargs
    advice = "常见原因：有的 Rank 少发了一次集合通信，或者等了一个从没发出的句柄。"
    return core.launch(rank_fn, world_size, (cls, *extra, kwargs), what, cls, core.TRAIN_HANG_S, advice=advice), kwargs


def _reference_rank(rank, world_size, *args):
    return core.course_object(LESSON).single_process_params(*args)


def _reference(world_size, kwargs, divide=True):
    """The parameters of single-process whole-batch training, computed in a rank process: in the kernel its
    optimizer's first step would import torch._dynamo, seconds the rank server has already paid."""
    from mgpu_helpers.launcher.launch import run_ranks

    lr = kwargs["lr"] if divide else kwargs["lr"] * world_size
    args = (kwargs["steps"], kwargs["widths"], kwargs["rows_per_rank"] * world_size, lr, kwargs.get("optimizer", "sgd"))
    return np.asarray(run_ranks(_reference_rank, 1, args=args, backend="gloo", quiet=True, stream=False).values[0])


def _compare_params(values, world_size, kwargs, what, sgd=True):
    want = _reference(world_size, kwargs)
    for rank, v in enumerate(values):
        got = v["params"]
        if np.allclose(got, want, atol=1e-5):
            continue
        if sgd and np.allclose(got, _reference(world_size, kwargs, divide=False), atol=1e-5):
            raise core.CheckFailed(
                f"{what}：world_size = {world_size} 时，参数和「梯度求和、没有平均」的结果一样："
                f"All-Reduce 得到的是 {world_size} 个 Rank 的和，还要除以 world_size。"
            )
        k = int(np.argmax(np.abs(got - want)))
        raise core.CheckFailed(
            f"{what}：world_size = {world_size}，rank {rank} 训练 {kwargs['steps']} 步后的参数和单进程"
            f"整批训练的不同（第 {k} 个参数元素应当是 {want[k]:.6g}，实际是 {got[k]:.6g}）。"
        )


def _common_rules(values, what):
    core.fail_first(
        (not values[0]["calls"], f"{what}：没有发出任何集合通信，各 Rank 的梯度没有交换。"),
        (
            any(v["unwaited_at_step"] for v in values),
            f"{what}：optimizer.step() 运行时，还有异步 All-Reduce 没有 "
            "wait()：优化器可能读到还没加完的梯度。step() 里先对每个句柄 wait()。",
        ),
    )


def check_overlap_dp(cls) -> None:
    """``OverlapDP``: one async all-reduce per gradient from its hook, waited before the step, averaged."""
    what, n_params = "OverlapDP", len(NUMELS)
    _start(cls, what)
    for world_size in WORLD_SIZES:
        values, kwargs = _run(cls, world_size, what)
        _common_rules(values, what)
        calls = [c for c in values[0]["calls"] if c[4] == 0]  # the first step's collectives
        reduces = [c for c in calls if c[0] == "all_reduce"]
        core.fail_first(
            (
                not any(c[3] for c in calls),
                f"{what}：所有集合通信都在 backward 结束以后才发出——这还是先算后传，"
                "没有重叠。在 on_grad_ready 里发出 All-Reduce。",
            ),
            (
                any(c[3] and not c[2] for c in calls),
                f"{what}：backward 里发出的 All-Reduce 是阻塞的（没有 "
                "async_op=True）：backward 会停下来等每一次通信，重叠就没有了。",
            ),
            (
                len(reduces) != n_params,
                f"{what}：这个模型有 {n_params} 个参数，每步应当各做一次 All-Reduce，"
                f"实际第一步做了 {len(reduces)} 次。",
            ),
        )
        _compare_params(values, world_size, kwargs, what)
    core.passed(
        f"{what}：每个梯度一好就异步 All-Reduce、step 前等齐并取平均；2 和 3 个 Rank 上 {STEPS} 步后的参数"
        "与单进程整批训练一致。"
    )


def check_plan_buckets(fn) -> None:
    """``plan_buckets(numels, bucket_numel)``: reverse order, close at >= size, keep the last bucket."""
    what = "plan_buckets"
    _start(fn, what)
    rng = random.Random()
    cases = [(NUMELS, 30), (NUMELS, 1), (NUMELS, 10**6), ([5, 5, 5, 5], 10), ([3, 200, 4], 50), ([], 8), ([7], 100)]
    cases += [([rng.randint(1, 90) for _ in range(rng.randint(2, 12))], rng.randint(1, 150)) for _ in range(20)]
    for numels, size in cases:
        got = core.call(fn, what, list(numels), size)
        want = core.course_object(LESSON).plan_buckets(numels, size)
        if got == want:
            continue
        where = f"numels = {numels}，bucket_numel = {size}"
        if not isinstance(got, (list, tuple)) or not all(isinstance(b, (list, tuple)) for b in got):
            raise core.CheckFailed(f"{what}（{where}）：要返回桶的列表，每个桶是参数下标的列表；实际是 {got!r}。")
        flat = [i for b in got for i in b]
        missing = sorted(set(range(len(numels))) - set(flat))
        extra = sorted({i for i in flat if flat.count(i) > 1})
        core.fail_first(
            (
                sorted(flat) != list(range(len(numels))),
                f"{what}（{where}）：每个参数正好进一个桶；"
                + (f"参数 {missing} 没有进任何桶（最后没装满的桶也要交出去？）" if missing else "")
                + (f"参数 {extra} 出现了不止一次" if extra else "")
                + f"。得到 {got!r}。",
            ),
            (
                flat == list(range(len(numels))) and len(numels) > 1,
                f"{what}（{where}）：桶是按参数的正序装的；"
                f"backward 先算出最后一个参数的梯度，所以要从最后一个参数装起。应当是 {want!r}，得到 {got!r}。",
            ),
        )
        raise core.CheckFailed(
            f"{what}（{where}）：桶的分法不对：应当是 {want!r}，得到 {got!r}。"
            "一个桶的元素个数达到或超过 bucket_numel 就封口（装进那个参数之后再比较）。"
        )
    core.passed(f"{what}：{len(cases)} 组参数大小（含比桶还大的参数、每个参数一个桶、全部一个桶、空模型）都分对了。")


def check_bucket_dp(cls) -> None:
    """``BucketDP``: one async all-reduce per full bucket, in plan order, waited, averaged, copied back."""
    what = "BucketDP"
    _start(cls, what)
    for world_size, bucket in zip(WORLD_SIZES, (30, 70)):  # 84 elements: one parameter outgrows each
        reference_plan = core.course_object(LESSON).plan_buckets  # the learner's plan is checked on its own
        sizes = [sum(NUMELS[i] for i in b) for b in reference_plan(NUMELS, bucket)]
        values, kwargs = _run(cls, world_size, what, options={"bucket_numel": bucket, "plan": reference_plan})
        _common_rules(values, what)
        calls = [c for c in values[0]["calls"] if c[4] == 0 and c[0] == "all_reduce"]
        got = [c[1] for c in calls]
        late, blocking = not any(c[3] for c in calls), any(c[3] and not c[2] for c in calls)
        core.fail_first(
            (late, f"{what}：所有桶都在 backward 结束以后才发出——没有重叠。桶一满就在 on_grad_ready 里发。"),
            (blocking, f"{what}：桶的 All-Reduce 是阻塞的（没有 async_op=True），backward 会停下来等它。"),
            (
                len(got) > len(sizes) and sum(got) >= sum(sizes),
                f"{what}：bucket_numel = {bucket} 时计划有 "
                f"{len(sizes)} 个桶，第一步却发了 {len(got)} 次 All-Reduce（大小 {got}）：桶还没满就发了，或者每个梯度单独发。",
            ),
            (
                got != sizes,
                f"{what}：bucket_numel = {bucket} 时每个桶应当正好发一次、按计划的顺序，大小依次是 {sizes}"
                f" 个元素；实际发的是 {got}。",
            ),
        )
        _compare_params(values, world_size, kwargs, what)
    core.passed(
        f"{what}：每个桶满了才发、一桶一次、顺序与计划一致；含一个比桶还大的参数；2 和 3 个 Rank 上的参数与"
        "单进程整批训练一致。"
    )


def check_overlap_fraction(fn) -> None:
    """``overlap_fraction(spans)``: the share of communication time inside backward spans."""
    from mgpu_helpers.launcher.trace import Span

    what = "overlap_fraction"
    _start(fn, what)
    bw = lambda a, b, k=0: Span("compute", f"backward {k}", a, b)
    comm = lambda a, b: Span("communicate", "all_reduce 4096", a, b)
    cases = [
        ("通信全在 backward 之后", [bw(0, 1), comm(1.5, 2.0)], 0.0),
        ("通信全在 backward 之内", [bw(0, 1), comm(0.2, 0.6)], 1.0),
        ("一段通信一半在内、一半在外", [bw(0, 1), comm(0.5, 1.5)], 0.5),
        ("两步的 backward，通信跨过一步的结尾", [bw(0, 1, 0), bw(2, 3, 1), comm(0.8, 1.2), comm(2.5, 3.5)], 0.5),
        ("还有一段 forward（不是 backward）", [Span("compute", "forward 0", 0, 1), bw(1, 2), comm(0.5, 1.5)], 0.5),
        ("没有通信", [bw(0, 1)], 0.0),
        ("两段通信长短不同", [bw(0, 1), comm(0.0, 0.9), comm(1.0, 1.1)], 0.9 / 1.0),
        ("只有通信、没有 backward", [comm(0.0, 1.0)], 0.0),
        ("通信和 backward 正好重合", [bw(0, 1), comm(0, 1)], 1.0),
        ("空的时间线", [], 0.0),
    ]
    rng = random.Random()
    for _ in range(10):
        spans, t = [], 0.0
        for k in range(rng.randint(1, 3)):
            b0, b1 = t, t + rng.uniform(0.5, 2)
            c0 = rng.uniform(b0, b1)
            c1 = c0 + rng.uniform(0.1, 2)
            spans += [bw(b0, b1, k), comm(c0, c1)]
            t = max(b1, c1) + rng.uniform(0.1, 1)  # one rank's backward spans never overlap
        cases.append(("随机时间线", spans, core.course_object(LESSON).overlap_fraction(spans)))
    for name, spans, want in cases:
        got = core.call(fn, what, list(spans))
        got = core.number_answer(got, f"{what}（{name}）：要返回一个 0 到 1 之间的数，实际是 {got!r}。")
        if abs(got - want) > 1e-9:
            hint = core.first_hint(
                (name.startswith("还有一段 forward"), "只算名字以 backward 开头的 compute 段。"),
                (
                    got > want and want < 1,
                    "只和 backward 重叠的那一部分才算；开始于 backward 之内、结束在外面的通信要截断。",
                ),
            )
            raise core.CheckFailed(f"{what}（{name}）：应当是 {want:.4g}，实际是 {got:.4g}。分母是通信的总时间。{hint}")
    core.passed(f"{what}：{len(cases)} 条时间线（全在内、全在外、跨过结尾、有 forward、没有通信、随机）都算对了。")


def check_zero1(cls) -> None:
    """``Zero1``: reduce-scatter the gradients, step the shard, all-gather the parameters, 1/n of the state."""
    what, numel = "Zero1", sum(NUMELS)
    _start(cls, what)
    for world_size in WORLD_SIZES:
        values, kwargs = _run(cls, world_size, what, optimizer="adam")
        order = values[0]["order"]
        first = order[: order.index("optimizer.step") + 2] if "optimizer.step" in order else order
        gathers = [k for k, o in enumerate(first) if o.startswith("all_gather")]
        steps = [k for k, o in enumerate(first) if o == "optimizer.step"]
        has_rs = {"reduce_scatter_tensor", "reduce_scatter"} & set(order)
        has_ag = {"all_gather_into_tensor", "all_gather"} & set(order)
        core.fail_first(
            (
                "all_reduce" in order,
                f"{what}：用了 All-Reduce。ZeRO-1 每个 Rank 只需要自己那一段梯度：用 "
                "reduce_scatter_tensor，更新后再 all_gather_into_tensor。",
            ),
            (not has_rs, f"{what}：没有 Reduce-Scatter：各 Rank 的梯度没有加在一起。"),
            (not has_ag, f"{what}：没有 All-Gather：每个 Rank 只更新了自己那一段，别的段还是旧参数。"),
            (
                gathers and steps and gathers[0] < steps[0],
                f"{what}：All-Gather 发生在 optimizer.step() 之前："
                "拼回去的是更新前的参数。先 step 本 Rank 的那一段，再 All-Gather。",
            ),
        )
        _compare_params(values, world_size, kwargs, what, sgd=False)
        want_bytes = 2 * -(-numel // world_size) * 4  # Adam's two float32 moments of this rank's shard
        if values[0]["state_bytes"] > want_bytes:
            raise core.CheckFailed(
                f"{what}：每个 Rank 的 Adam 状态有 {values[0]['state_bytes']} 字节，ZeRO-1 应当只有自己那一段的 "
                f"{want_bytes} 字节：优化器要只管 self.local。"
            )
    core.passed(
        f"{what}：Reduce-Scatter → 本段 Adam → All-Gather；2 和 3 个 Rank 上参数与单进程 Adam 一致，"
        "每个 Rank 的 Adam 状态只有 1/n。"
    )


def check_accumulate_dp(cls) -> None:
    """ex13 ``AccumulateDP``: no communication inside ``no_sync()``; one all-reduce per gradient per step."""
    what, n_params = "AccumulateDP", len(NUMELS)
    _start(cls, what)
    for world_size, micro in ((2, 2), (3, 4)):
        # 4 rows a rank, split into micro-batches
        values, kwargs = _run(cls, world_size, what, watched_accumulate, (micro,), rows_per_rank=4)
        _common_rules(values, what)
        v = values[0]
        reduces = [c for c in v["calls"] if c[4] == 0 and c[0] == "all_reduce"]
        late = not any(c[3] for c in reduces)
        core.fail_first(
            (
                v["no_sync_calls"],
                f"{what}：no_sync() 里的 micro-batch 也发了 {v['no_sync_calls']} 次集合通信；"
                "梯度累积的意义就是这几次不通信，只在最后一个 micro-batch 之后交换一次。",
            ),
            (
                len(reduces) != n_params,
                f"{what}：{micro} 个 micro-batch 的一步应当每个参数只 All-Reduce 一次"
                f"（共 {n_params} 次），实际第一步做了 {len(reduces)} 次。",
            ),
            (late, f"{what}：All-Reduce 都在最后一次 backward 结束以后才发出，没有和它重叠；从钩子里发。"),
            (
                not v["resumed_after_error"],
                f"{what}：no_sync() 里的代码出了错（抛出异常）以后，下一次 backward "
                "一次通信也没有：离开 no_sync() 时没有恢复同步。出错时 yield 之后的代码不会运行，恢复要放在 finally 里。",
            ),
        )
        _compare_params(values, world_size, kwargs, what)
    core.passed(
        f"{what}：no_sync 里不通信、每步每个参数一次异步 All-Reduce；2 个 Rank × 2 个 micro-batch、"
        "3 个 Rank × 4 个 micro-batch 的参数与单进程整批训练一致。"
    )


def check_step_seconds(fn) -> None:
    """ex13 ``step_seconds(ready_s, comm_s)``: when the last bucket's all-reduce ends, with one channel."""
    what = "step_seconds"
    core.require_written(fn, what)
    cases = [
        ("通信比计算短，每个桶都赶得上", [0.02, 0.04, 0.06], [0.005, 0.005, 0.005]),
        ("通信比计算长，桶要排队", [0.01, 0.02, 0.03], [0.03, 0.03, 0.03]),
        ("只有一个桶", [0.05], [0.02]),
        ("前面的桶排队、最后一个桶来得很晚", [0.0, 0.001, 0.2], [0.05, 0.05, 0.01]),
        ("通信为零", [0.01, 0.03], [0.0, 0.0]),
    ]
    rng = random.Random()
    for _ in range(15):
        n = rng.randint(2, 8)
        ready = sorted(rng.uniform(0, 0.1) for _ in range(n))
        cases.append(("随机", ready, [rng.uniform(0, 0.03) for _ in range(n)]))
    for name, ready, comm in cases:
        want = 0.0  # one channel: a bucket starts once it is ready and the one before it is done
        for r, c in zip(ready, comm):
            want = max(want, r) + c
        got = core.call(fn, what, list(ready), list(comm))
        got = core.number_answer(got, f"{what}（{name}）：要返回秒数（一个数），实际是 {got!r}。")
        near = lambda value: abs(got - value) <= 1e-9
        if near(want):
            continue
        unqueued = max(r + c for r, c in zip(ready, comm))
        hint = core.first_hint(
            (near(ready[-1] + sum(comm)), "这是「backward 结束后才开始传」的时间；桶准备好就可以开始传。"),
            (near(unqueued), "这假设每个桶都能立刻开始传；但通信一次只传一个桶，后面的桶要排队。"),
            default="一次只能有一个 All-Reduce 在跑：一个桶要等它自己准备好，也要等前一个桶传完。",
        )
        raise core.CheckFailed(
            f"{what}（{name}：ready_s = {[round(r, 4) for r in ready]}，comm_s = "
            f"{[round(c, 4) for c in comm]}）：应当是 {want:.4g} 秒，实际是 {got:.4g}。{hint}"
        )
    core.passed(f"{what}：{len(cases)} 组桶的时间（赶得上、要排队、只有一个桶、通信为零、随机）都算对了。")


try_overlap_dp = core.fill_in_cell(check_overlap_dp, f"{LESSON}.OverlapDP", "OverlapDP")
try_plan_buckets = core.fill_in_cell(check_plan_buckets, f"{LESSON}.plan_buckets", "plan_buckets")
try_bucket_dp = core.fill_in_cell(check_bucket_dp, f"{LESSON}.BucketDP", "BucketDP")
try_overlap_fraction = core.fill_in_cell(check_overlap_fraction, f"{LESSON}.overlap_fraction", "overlap_fraction")
try_zero1 = core.fill_in_cell(check_zero1, f"{LESSON}.Zero1", "Zero1")

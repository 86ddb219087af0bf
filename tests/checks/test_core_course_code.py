"""The one rule of the course's own code (mgpu_helpers.checks.core.course_code): the course's implementation of
an exercise, a checker's reference, and the course's models, widgets and checks are not the learner's answer,
however the learner's code reaches them (a name, an alias, an import inside, a helper or wrapper of theirs,
another course function, a name built at run time), in the notebook's process and in the ranks; the checker
itself may still use its reference, and a helper of the learner's that merely shares a course name is theirs."""

import pytest
from learner_code import by_value, warm_ranks

import mgpu_helpers as mh

ENV = mh.setup(show=False, prewarm=False)

from mgpu_helpers.checks import p2p, semantics  # noqa: E402
from mgpu_helpers.checks.core import COURSE_PACKAGES, CheckFailed, course_code_reached, refusing  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _warm():
    warm_ranks()


def test_the_course_code_under_an_alias_is_refused_before_the_run():
    f = by_value(
        """
        import mgpu_helpers as mh
        borrowed = mh.lessons.p2p.exchange
        def exchange(send_buf, dst, recv_buf, src, group=None):
            return borrowed(send_buf, dst, recv_buf, src, group)""",
        "exchange",
    )
    assert "mh.lessons.p2p.exchange" in course_code_reached(f, [mh.lessons.p2p.exchange])
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

    assert course_code_reached(by_value(source, "f"), [ring.ring_all_reduce]) is not None


def test_the_course_code_reached_only_at_run_time_is_refused_in_the_ranks():
    f = by_value(
        """
        import mgpu_helpers as mh
        def exchange(send_buf, dst, recv_buf, src, group=None):
            lesson = getattr(mh.lessons, "p" + "2p")         # invisible to reading the code
            return getattr(lesson, "exch" + "ange")(send_buf, dst, recv_buf, src, group)""",
        "exchange",
    )
    assert course_code_reached(f, [mh.lessons.p2p.exchange]) is None
    with pytest.raises(CheckFailed, match=r"rank \d 调用了课程自己的 mh\.lessons\.p2p\.exchange"):
        p2p.check_exchange(f, world_sizes=(2,))


def test_the_checker_reference_is_refused():
    with pytest.raises(CheckFailed, match="课程自己的 mh.checks.semantics.reference_all_gather_uneven"):
        semantics.check_all_gather_uneven(semantics.reference_all_gather_uneven, world_sizes=(2,))
    wrapped = by_value(
        """
        from mgpu_helpers.checks.semantics import reference_all_gather_uneven as ref
        def mine(rank, world_size, x):
            return ref(rank, world_size, x)""",
        "mine",
    )
    with pytest.raises(CheckFailed, match="课程自己的 .*reference_all_gather_uneven（你的代码里叫 ref）"):
        semantics.check_all_gather_uneven(wrapped, world_sizes=(2,))


def test_a_helper_of_the_learners_with_a_course_like_name_is_not_refused():
    f = by_value(
        """
        def ring_all_reduce(x):          # the learner's own, same name as the course's
            return x
        def f(x):
            return ring_all_reduce(x)""",
        "f",
    )
    from mgpu_helpers.lessons import ring

    assert course_code_reached(f, [ring.ring_all_reduce], packages=COURSE_PACKAGES) is None


def test_in_process_refusal_lets_the_checker_reference_through():
    from mgpu_helpers.lessons import cost_model

    hidden = [cost_model.ring_allreduce_seconds]

    def sneaky(*args):
        return hidden[0](*args)  # not visible by name

    with (
        pytest.raises(CheckFailed, match=r"t：调用了课程自己的 mh\.lessons\.cost_model\.ring_allreduce_seconds——"),
        refusing("t", hidden, packages=False),
    ):
        sneaky(1, 2, 3e-6, 1e-9)
    assert cost_model.ring_allreduce_seconds(1, 1, 1.0, 1.0) == 0  # the code is put back


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

    with refusing("split", [rules.contiguous_ranges], packages=False):
        sharding.check_contiguous_ranges(_own_ranges)  # the checker computes its expected values with it
        with pytest.raises(CheckFailed, match="课程自己的 .*contiguous_ranges"):
            sharding.check_contiguous_ranges(own_then_course)
    assert "通过" in capsys.readouterr().out
    assert rules.contiguous_ranges(5, 2) == [range(3), range(3, 5)]  # the code is put back


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


HIDDEN_PATHS = {
    "a name built at run time": """
        import mgpu_helpers as mh
        def f(n, ws):
            return getattr(mh.lessons.sharding_rules, "contiguous_" + "ranges")(n, ws)""",
    "a copy kept in a list": """
        from mgpu_helpers.lessons import sharding_rules as rules
        KEPT = [getattr(rules, "contiguous_" + "ranges")]
        def f(n, ws):
            return KEPT[0](n, ws)""",
    "a wrapper of the learner's around the hidden copy": """
        import mgpu_helpers as mh
        def split(n, ws):
            return getattr(mh.lessons.sharding_rules, "contiguous_" + "ranges")(n, ws)
        def f(n, ws):
            return split(n, ws)""",
}


@pytest.mark.parametrize("source", list(HIDDEN_PATHS.values()), ids=list(HIDDEN_PATHS))
def test_a_path_no_reading_can_see_is_refused_when_it_runs(source):
    from mgpu_helpers.checks import sharding

    f = by_value(source, "f")
    assert course_code_reached(f, [mh.lessons.sharding_rules.contiguous_ranges]) is None
    with pytest.raises(CheckFailed, match=r"调用了课程自己的 mh\.lessons\.sharding_rules\.contiguous_ranges"):
        sharding.try_contiguous_ranges(f)


def test_the_name_the_learner_gave_the_course_code_is_named_at_run_time():
    from mgpu_helpers.checks import sharding

    f = by_value(
        """
        import mgpu_helpers as mh
        split = getattr(mh.lessons.sharding_rules, "contiguous_" + "ranges")
        def f(n, ws):
            return split(n, ws)""",
        "f",
    )
    with pytest.raises(CheckFailed, match=r"sharding_rules\.contiguous_ranges（你的代码里叫 split）"):
        sharding.try_contiguous_ranges(f)


def test_an_exercise_check_refuses_its_reference_reached_at_run_time():
    def by_course(costs, world_size):  # the course's assignment, by a name no reading finds
        return getattr(mh.lessons.sharding_rules, "assign_" + "by_cost")(costs, world_size)

    with pytest.raises(CheckFailed, match=r"调用了课程自己的 mh\.lessons\.sharding_rules\.assign_by_cost"):
        mh.checks.check_shard_contiguous_by_cost(by_course)


def test_a_refusal_the_learners_code_catches_still_fails_the_check():
    from mgpu_helpers.checks import sharding

    def swallowing(n, ws):
        try:
            getattr(mh.lessons.sharding_rules, "contiguous_" + "ranges")(n, ws)
        except Exception:
            pass
        return _own_ranges(n, ws)

    with pytest.raises(CheckFailed, match="课程自己的 mh.lessons.sharding_rules.contiguous_ranges"):
        sharding.try_contiguous_ranges(swallowing)

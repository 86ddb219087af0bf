"""One problem shape for the checkers that launch ranks: a row of a table (:class:`RankProblem`) says what the
learner's ``fn(rank, world_size, x, *extra)`` must return; :func:`run_problem` runs it on every world size."""

from collections.abc import Callable
from dataclasses import dataclass

from .compare import compare, new_rng
from .fill_in import passed
from .ranks import HANG_S, launch_check

WORLD_SIZES = (2, 3, 4)


@dataclass(frozen=True)
class RankCase:  # one drawn case of a RankProblem: the inputs of every rank and what each rank must return
    world_size: int
    inputs: list
    extra: tuple
    expected: list


@dataclass(frozen=True)
class RankProblem:
    """An exercise that runs the reader's ``fn(rank, world_size, x, *extra)`` on ranks (one row of a table): ``name`` as
    messages call it; ``what`` it must do; ``make_case(rng, world_size) -> (inputs, extra)``, one input per rank;
    ``reference(inputs, extra, world_size) -> [expected value of each rank]``; ``done``: the pass line (``{sizes}``:
    the world sizes run); ``explain(case, rank, got) -> hint`` (or it raises :class:`CheckFailed` itself); ``where(case,
    rank)``: how a failure names the case; ``forbid``, ``course``: as :func:`~.ranks.launch_check`'s."""

    name: str
    what: str
    make_case: Callable
    reference: Callable
    done: str
    explain: Callable | None = None
    where: Callable | None = None
    forbid: tuple = ()
    course: tuple = ()


def run_problem(problem: RankProblem, fn, world_sizes=None, timeout: float = HANG_S) -> list[RankCase]:
    """Prints the pass line and returns the cases run, or raises :class:`CheckFailed` at the first difference."""
    rng = new_rng()
    sizes = tuple(world_sizes or WORLD_SIZES)
    if any(int(w) != w or w < 1 for w in sizes):
        raise ValueError(f"world_sizes must be whole numbers >= 1, got {world_sizes!r}")
    where = problem.where or (lambda case, rank: f"world_size = {case.world_size}，rank {rank}")
    cases = []
    for world_size in sizes:
        inputs, extra = problem.make_case(rng, world_size)
        case = RankCase(world_size, inputs, tuple(extra), problem.reference(inputs, tuple(extra), world_size))
        got = launch_check(
            fn, problem.what, world_size, inputs, case.extra, problem.forbid, timeout=timeout, course=problem.course
        )
        for rank in range(world_size):
            hint = problem.explain(case, rank, got[rank]) if problem.explain else ""
            compare(got[rank], case.expected[rank], where(case, rank), hint)
        cases.append(case)
    passed(problem.done.format(sizes=", ".join(map(str, sizes))))
    return cases

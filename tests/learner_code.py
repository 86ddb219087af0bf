"""Helpers of the checkers' tests: the learner's code as a notebook cell makes it, and ranks warmed up first."""

import textwrap


def by_value(source: str, name: str):
    """A function defined from source text, travelling to ranks by value (like one defined in a cell)."""
    ns = {"__name__": "learner_cell"}
    exec(textwrap.dedent(source), ns)
    return ns[name]


def warm_ranks() -> None:
    """The rank server up before the clocks start, forked by the fork server with what the optimizers need
    (torch._dynamo) imported, as in a notebook: so the first check does not pay for a cold start."""
    from mgpu_helpers.launcher import launch

    launch.prewarm(wait=True)
    launch.run_ranks(lambda r, world_size: r, 3, backend="gloo", timeout=120, stream=False, quiet=True)

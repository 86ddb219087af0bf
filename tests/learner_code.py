"""Helpers of the checkers' tests: the learner's code as a notebook cell makes it, and ranks warmed up first."""

import textwrap

# 04's exchange as a learner writes it right with blocking calls: odd ranks receive first, so no cycle of waits.
PARITY_EXCHANGE = """
def exchange(send_buf, dst, recv_buf, src, group=None):
    import torch.distributed as dist
    moves = []
    if send_buf.numel():
        moves.append(lambda: dist.send(send_buf, dst, group))
    if recv_buf.numel():
        moves.append(lambda: dist.recv(recv_buf, src, group))
    if dist.get_rank() % 2:
        moves.reverse()                 # odd ranks receive first: the cycle of waits is broken
    for move in moves:
        move()
    return []
"""


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

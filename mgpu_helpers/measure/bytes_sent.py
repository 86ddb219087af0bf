"""The bytes each rank sends in a collective, counted message by message as the ranks run.

NCCL and gloo do not report how many bytes each rank put on its links. To measure it, the collectives of
notebook 07 are run here as the bandwidth-optimal schedules that busbw is defined by, written from
point-to-point messages (as notebook 05 builds the ring): every message a rank sends goes through
:class:`SentBytes`, which adds up its size. Each result is checked against torch's own collective, so the
counted schedule is a correct implementation and not a model.

- all_gather: a ring of ``world_size - 1`` steps; each step every rank passes one piece of ``nbytes / n``;
- reduce_scatter: the same ring, adding instead of copying; rank r ends with piece r of the sum;
- all_reduce: reduce-scatter then all-gather;
- reduce (to rank 0): a chain ``n-1 -> n-2 -> ... -> 0``; every rank but the root passes on the whole buffer,
  the root only receives.

``nbytes`` is the size of the full buffer (the all-gather's result, the reduce-scatter's input), as in
:func:`mgpu_helpers.models.bandwidth.bytes_sent_per_rank`. The buffers are float32.
"""
from __future__ import annotations

OPS = ("reduce", "all_reduce", "all_gather", "reduce_scatter")
ELEMENT_BYTES = 4            # float32


def formula_bytes_sent(op: str, nbytes: int, world_size: int, rank: int, root: int = 0) -> float:
    """What the cost model says rank ``rank`` sends: the bandwidth model's per-rank bytes, except that in a reduce
    the root sends nothing (the bandwidth model's figure is what every other rank sends, busbw's factor 1)."""
    from mgpu_helpers.models import bandwidth

    if op == "reduce" and rank == root:
        return 0.0
    return bandwidth.bytes_sent_per_rank(op, nbytes, world_size)


class SentBytes:
    """Point-to-point messages that add up, in :attr:`total`, the bytes this rank sends."""

    def __init__(self):
        self.total = 0

    def exchange(self, send, dst: int, recv, src: int) -> None:
        """Send ``send`` to ``dst`` and receive ``recv`` from ``src`` together (one step of a ring).

        Grouped in one ``batch_isend_irecv``: under NCCL a lone send may wait for its receive, and a ring of
        ranks that all send first would wait on each other.
        """
        import torch.distributed as dist

        self.total += send.numel() * send.element_size()
        ops = [dist.P2POp(dist.isend, send, dst), dist.P2POp(dist.irecv, recv, src)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    def send(self, tensor, dst: int) -> None:
        import torch.distributed as dist

        self.total += tensor.numel() * tensor.element_size()
        dist.send(tensor, dst)


def ring_all_gather(mine, rank: int, world_size: int, counter: SentBytes):
    """Every rank's piece ``mine`` (equal sizes), concatenated in rank order, on every rank."""
    import torch

    ws = world_size
    pieces = [torch.empty_like(mine) for _ in range(ws)]
    pieces[rank].copy_(mine)
    for step in range(ws - 1):           # pass on the piece that arrived last (at step 0: my own)
        counter.exchange(pieces[(rank - step) % ws], (rank + 1) % ws, pieces[(rank - step - 1) % ws], (rank - 1) % ws)
    return torch.cat(pieces)


def ring_reduce_scatter(x, rank: int, world_size: int, counter: SentBytes):
    """Piece ``rank`` (of ``world_size`` equal pieces) of the sum of every rank's ``x``."""
    import torch

    ws = world_size
    acc = [p.clone() for p in x.chunk(ws)]
    incoming = torch.empty_like(acc[0])
    for step in range(ws - 1):           # after step s, the piece received holds s + 2 ranks' terms
        counter.exchange(acc[(rank - step - 1) % ws], (rank + 1) % ws, incoming, (rank - 1) % ws)
        acc[(rank - step - 2) % ws] += incoming
    return acc[rank]


def chain_reduce(x, rank: int, world_size: int, counter: SentBytes):
    """The sum of every rank's ``x`` on rank 0 (None elsewhere), passed along ``n-1 -> ... -> 1 -> 0``."""
    import torch
    import torch.distributed as dist

    acc = x.clone()
    if rank < world_size - 1:            # everybody but the far end first receives the partial sum behind it
        incoming = torch.empty_like(acc)
        dist.recv(incoming, rank + 1)
        acc += incoming
    if rank > 0:                         # ... and passes it on towards the root; the root sends nothing
        counter.send(acc, rank - 1)
        return None
    return acc


def count_bytes_sent(rank: int, world_size: int, nbytes: int, ops=OPS) -> dict:
    """Rank function: run each collective of ``ops`` on a float32 buffer of ``nbytes`` as point-to-point
    messages, count the bytes this rank sends, and check the result against torch's own collective.

    Returns ``{op: bytes this rank sent}``. ``nbytes`` must be a multiple of ``4 * world_size``.
    """
    import torch
    import torch.distributed as dist

    from mgpu_helpers.launcher.ranks import rank_device

    if nbytes % (ELEMENT_BYTES * world_size):
        raise ValueError(f"nbytes must be a multiple of 4 * world_size = {ELEMENT_BYTES * world_size}, got {nbytes}")
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown collective(s) {unknown}; choose from {list(OPS)}")
    device = rank_device()
    numel = nbytes // ELEMENT_BYTES
    x = (torch.arange(numel, device=device) % 7 + rank).to(torch.float32)     # small whole numbers: exact sums
    sent = {}
    for op in ops:
        counter = SentBytes()
        if op == "all_gather":
            mine = x.chunk(world_size)[rank].contiguous()
            got = ring_all_gather(mine, rank, world_size, counter)
            want = [torch.empty_like(mine) for _ in range(world_size)]
            dist.all_gather(want, mine)
            want = torch.cat(want)
        elif op == "reduce_scatter":
            got = ring_reduce_scatter(x, rank, world_size, counter)
            want = torch.empty_like(got)
            dist.reduce_scatter(want, [c.contiguous() for c in x.chunk(world_size)])
        elif op == "all_reduce":
            got = ring_all_gather(ring_reduce_scatter(x, rank, world_size, counter), rank, world_size, counter)
            want = x.clone()
            dist.all_reduce(want)
        else:
            got = chain_reduce(x, rank, world_size, counter)
            want = x.clone()
            dist.reduce(want, dst=0)
            if rank != 0:
                got = want = torch.zeros(0)          # only the root's buffer holds the sum
        if not torch.equal(got, want):
            raise AssertionError(f"rank {rank}: the counted {op} schedule gave a different result from dist.{op}")
        sent[op] = counter.total
    return sent

"""The bytes each rank sends in a collective, counted message by message as the ranks run: NCCL and gloo do not report
how many bytes each rank put on its links, so notebook 07's collectives run here as the bandwidth-optimal schedules that
busbw is defined by: the all-reduce is notebook 05's own ring, every message of which goes through notebook 04's
``exchange``, wrapped here to add up each message's size (its first ``n-1`` steps are the reduce-scatter, the last
``n-1`` the all-gather). The reduce (to rank 0) is a chain ``n-1 -> ... -> 0``. Each result is checked against torch's
own collective: the counted schedule is correct, not a model. ``nbytes`` is the size of the full buffer, as in
:func:`mgpu_helpers.models.bandwidth.bytes_sent_per_rank`."""

from mgpu_helpers.launcher.ranks import rank_device

OPS = ("reduce", "all_reduce", "all_gather", "reduce_scatter")
ELEMENT_BYTES = 4  # float32


def ring_message_bytes(x) -> list[int]:
    """All-reduce ``x`` in place with the lesson's ring: the size of each message this rank sent, in order."""
    from mgpu_helpers.lessons import p2p, ring

    sizes = []
    lesson_exchange = p2p.exchange

    def counted(send_buf, dst, recv_buf, src, group=None):
        sizes.append(send_buf.numel() * send_buf.element_size())
        return lesson_exchange(send_buf, dst, recv_buf, src, group)

    p2p.exchange = counted  # the ring looks it up on every call: each message passes here
    try:
        ring.ring_all_reduce(x)
    finally:
        p2p.exchange = lesson_exchange
    return sizes


def chain_reduce(x, rank: int, world_size: int) -> tuple:
    """``(sum on rank 0 or None, bytes this rank sent)``, the partial sums passed along ``n-1 -> ... -> 0``."""
    import torch
    import torch.distributed as dist

    acc = x.clone()
    if rank < world_size - 1:  # everybody but the far end first receives the partial sum behind it
        incoming = torch.empty_like(acc)
        dist.recv(incoming, rank + 1)
        acc += incoming
    if rank > 0:  # ... and passes it on towards the root; the root sends nothing
        dist.send(acc, rank - 1)
        return None, acc.numel() * acc.element_size()
    return acc, 0


def count_bytes_sent(rank: int, world_size: int, nbytes: int, ops=OPS) -> dict:
    """Rank function: run each collective of ``ops`` on a float32 buffer of ``nbytes`` (a multiple of
    ``4 * world_size``) as point-to-point messages; returns ``{op: bytes this rank sent}``."""
    import torch
    import torch.distributed as dist

    if nbytes % (ELEMENT_BYTES * world_size):
        raise ValueError(f"nbytes must be a multiple of 4 * world_size = {ELEMENT_BYTES * world_size}, got {nbytes}")
    if unknown := [op for op in ops if op not in OPS]:
        raise ValueError(f"unknown collective(s) {unknown}; choose from {list(OPS)}")
    x = (torch.arange(nbytes // ELEMENT_BYTES, device=rank_device()) % 7 + rank).to(torch.float32)  # exact sums
    if {"all_reduce", "all_gather", "reduce_scatter"} & set(ops):
        got, want = x.clone(), x.clone()
        sizes = ring_message_bytes(got)
        dist.all_reduce(want)
        if not torch.equal(got, want):
            raise AssertionError(f"rank {rank}: the counted ring gave a different result from dist.all_reduce")
        half = world_size - 1
        ring_sent = {"reduce_scatter": sum(sizes[:half]), "all_gather": sum(sizes[half:]), "all_reduce": sum(sizes)}
    if "reduce" in ops:
        got, sent_reduce = chain_reduce(x, rank, world_size)
        want = x.clone()
        dist.reduce(want, dst=0)
        if rank == 0 and not torch.equal(got, want):
            raise AssertionError(f"rank {rank}: the counted reduce gave a different result from dist.reduce")
    return {op: sent_reduce if op == "reduce" else ring_sent[op] for op in ops}

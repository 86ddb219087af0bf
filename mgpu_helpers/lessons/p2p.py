# Generated from solutions/04_point_to_point.ipynb by `python -m mgpu_helpers.tools.nbexport`: edit the notebook, not this file.
"""The code taught in solutions/04_point_to_point.ipynb (04 点对点通信：send / recv，以及一个经典的坑).

Each block below is one `#| export` cell of that notebook, in order."""

def exchange(send_buf, dst: int, recv_buf, src: int, group=None):
    """One step of a ring: a send of ``send_buf`` to ``dst`` and a receive into ``recv_buf`` from ``src``,
    posted so that every rank of a ring can call it at once; returns the requests to ``wait()`` on.

    An empty (or None) buffer is left out, so a chunk that comes out empty costs nothing; with nothing to
    move the list is empty.
    """
    import torch.distributed as dist

    # ✎ 长度为 0 的缓冲区跳过；返回调用方要 wait() 的请求列表（用阻塞调用做完了就返回 []）
    # Posted together with batch_isend_irecv: under NCCL the two calls form one group, so neither waits
    # for the other, and the order of the calls does not matter.
    ops = []
    if send_buf is not None and send_buf.numel() > 0:
        ops.append(dist.P2POp(dist.isend, send_buf, dst, group))
    if recv_buf is not None and recv_buf.numel() > 0:
        ops.append(dist.P2POp(dist.irecv, recv_buf, src, group))
    return dist.batch_isend_irecv(ops) if ops else []


def ring_pass(token, steps: int | None = None) -> list:
    """Pass ``token`` to the right-hand rank ``steps`` times (default ``world_size - 1``); return the
    tensors that arrived from the left, one per step, in order.

    Every rank calls it with a tensor of the same shape and dtype. After ``world_size - 1`` steps each rank
    has seen every other rank's token once: the skeleton of notebook 05's ring all-reduce.
    """
    import torch
    import torch.distributed as dist

    rank, world_size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    steps = world_size - 1 if steps is None else steps
    # ✎ 用上面的 exchange；想清楚每一步发的是哪一块、收进哪里
    arrived = []
    for _ in range(steps):
        incoming = torch.empty_like(token)  # a fresh buffer: `token` may still be on its way to the right
        for request in exchange(token, right, incoming, left):
            request.wait()
        arrived.append(incoming)
        token = incoming  # what came from the left travels on to the right
    return arrived

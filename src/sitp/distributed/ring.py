"""The ring all-reduce on ``send`` and ``recv``: how a sum over ``p`` ranks can cost each
rank only about twice the message in traffic, whatever ``p`` is (chapter 7.1).

This is a teaching version, to read beside MPI's own ``Allreduce`` (which picks among
several algorithms by message size and is what :func:`sitp.distributed.all_reduce`
calls); ``scripts/bench_ring.py`` times the two.

The ranks stand in a ring: each sends only to its right neighbour and receives only from
its left one. The tensor is cut into ``p`` chunks. In the first phase, a reduce-scatter
of ``p - 1`` steps, each rank passes a chunk to the right and adds the chunk that arrives
from the left into its own copy; after it, rank ``r`` holds the complete sum of chunk
``(r + 1) % p``. In the second phase, an all-gather of ``p - 1`` more steps, the complete
chunks travel once more round the ring, each overwriting the stale copies it meets. Every
rank sends ``2 (p - 1)`` chunks of ``n / p`` elements: ``2 (p - 1) / p`` times the
tensor, under twice it for any ``p``.
"""

from __future__ import annotations

from sitp import distributed as dist
from sitp._tensor import creation
from sitp.autograd.grad_mode import no_grad


# --8<-- [start:ring]
def ring_all_reduce(tensor):
    """Sum ``tensor`` over the ranks of the default group, in place, by the ring
    algorithm: ``2 (p - 1)`` steps of one send and one receive per rank. Returns it."""
    p, r = dist.get_world_size(), dist.get_rank()
    if p == 1:
        return tensor
    right, left = (r + 1) % p, (r - 1) % p
    with no_grad():
        dense = tensor.contiguous()  # a copy only if tensor is not contiguous
        flat = dense.view(-1)
        n = flat.numel()
        bounds = [k * n // p for k in range(p + 1)]  # chunk k is flat[bounds[k]:bounds[k+1]]

        def chunk(k):
            k %= p
            return flat[bounds[k] : bounds[k + 1]]

        inbox = creation.empty(n // p + 1, dtype=flat.dtype, device=flat.device)

        def exchange(send_k, into):
            """Send chunk send_k to the right while receiving into ``into`` from the left."""
            request = dist.isend(chunk(send_k), dst=right)  # started, not waited for:
            dist.recv(into, src=left)  # every rank sends and receives at once
            request.wait()
            return into

        # reduce-scatter: at step s, pass on the partial sum of chunk r - s, and add
        # into chunk r - s - 1 what the left neighbour has summed of it so far
        for s in range(p - 1):
            mine = chunk(r - s - 1)
            mine.add_(exchange(r - s, inbox[: mine.numel()]))
        # rank r now holds the whole sum of chunk r + 1; all-gather: pass the whole
        # sums round the ring, each received straight over the partial one it replaces
        for s in range(p - 1):
            exchange(r - s + 1, chunk(r - s))
        if dense is not tensor:
            tensor.copy_(dense)
    return tensor


# --8<-- [end:ring]

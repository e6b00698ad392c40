"""Real gloo process groups for tests: spawn `world` rank processes, collect what they report, and leave
no process behind."""

import os
import socket

import torch.multiprocessing as mp


def gather_from_ranks(worker, world: int, expected: int, join_timeout: float = 120) -> list:
    """Run worker(rank, port, queue) in `world` spawned processes (a free loopback port for their
    store) and return the first `expected` items they put on the queue; every process must exit 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        items = [queue.get() for _ in range(expected)]
        for p in procs:
            p.join(join_timeout)
            assert p.exitcode == 0
        return items
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, 9)


def subgroups(rank: int, port: int, world: int):
    """In a rank process: join the `world` gloo group on the loopback port, then yield every group of
    the first R ranks (R = 2..world) this rank belongs to, as (R, group). Every rank must create every
    group, in the same order, so the ranks outside one still take part in creating it."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for ranks in range(2, world + 1):
        group = dist.new_group(list(range(ranks)))
        if rank < ranks:
            yield ranks, group

#!/usr/bin/python3
"""The PyTorch peer of Quartet's data_parallel arm for bench/ddp_scaling: N processes on
127.0.0.1, DistributedDataParallel over Gloo (default buckets, 25 MiB), the cnn of
docs/models.md, SGD with momentum 0.9, cross-entropy, `batch` samples per rank per step
from a pool of random batches. Prints one JSON line: samples/s of the whole group over
the timed steps (after `warmup` untimed ones), and rank 0's seconds per step.

Run it with Debian's /usr/bin/python3 (python3-torch).
"""

import argparse
import json
import os
import socket
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, out):
    # Before torch loads OpenBLAS and its OpenMP pool.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_models import CNN

    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(CNN())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed + rank)
    pool = [(torch.rand(args.batch, 1, 28, 28, generator=gen), torch.randint(0, 10, (args.batch,), generator=gen))
            for _ in range(4)]

    def step(i):
        x, y = pool[i % len(pool)]
        x = x.clone()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        out.put({"side": "torch", "ranks": args.ranks, "threads": args.threads, "batch_per_rank": args.batch,
                 "steps": args.steps, "samples_per_second": args.ranks * args.batch * args.steps / seconds,
                 "seconds_per_step": seconds / args.steps, "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    args = parse_args()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, out)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    result = out.get(timeout=1800)
    for p in procs:
        p.join()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise SystemExit(f"torch_ddp.py: a rank failed (exit codes {bad})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

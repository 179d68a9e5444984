#!/usr/bin/python3
"""PyTorch's side of `quartet bench-collectives`: all-reduce over torch.distributed
(gloo, CPU, 127.0.0.1), the same sizes, the same checks, the same columns; with
--op all_to_all, all_to_all_single of a rank's buffer in N equal chunks (the columns of
`quartet bench-collectives --op all_to_all`).

    /usr/bin/python3 bench/torch_allreduce.py --ranks 2 --sizes 1M,16M,64M --iters 20
    /usr/bin/python3 bench/torch_allreduce.py --op all_to_all --ranks 4 --sizes 1M,16M
    /usr/bin/python3 bench/torch_allreduce.py --tcp-baseline --sizes 1M,16M,64M

--tcp-baseline measures the ceiling instead: one TCP stream on 127.0.0.1 moving each size
(one way), and one stream each way at once (what every rank of a 2-rank ring does).

Timing and checks as in quartet: per size, warm-up all-reduces on zeros, then blocks of
in-place sums whose values stay normal floats; after each block every element is checked
(rank r, element i starts at (r+1)(i%7+1)2^-e, ends at (i%7+1)N(N+1)/2 N^(L-1) 2^-e);
time is the slowest rank's mean; busbw = algbw * 2(N-1)/N (nccl-tests).
"""

import argparse
import math
import os
import socket
import sys
import time


def parse_sizes(text):
    out = []
    for item in text.split(","):
        mult = {"K": 1 << 10, "k": 1 << 10, "M": 1 << 20, "m": 1 << 20, "G": 1 << 30, "g": 1 << 30}.get(item[-1:], 1)
        digits = item[:-1] if mult != 1 else item
        if not digits.isdigit() or int(digits) <= 0:
            raise SystemExit(f"--sizes: {item!r} is not a size (examples: 4096, 1M, 64M)")
        size = int(digits) * mult
        if size % 4:
            raise SystemExit(f"--sizes: {item} is not a whole number of floats")
        out.append(size)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_blocks(iters, ranks):
    growth = math.log2(max(ranks, 2))
    max_length = int(math.floor(100.0 / growth)) + 1
    blocks, left = [], iters
    while left > 0:
        length = min(left, max_length)
        blocks.append((length, int(math.ceil((length - 1) * growth))))
        left -= length
    return blocks


def a2a_values(torch, q, p, n, chunk):
    """Rank q's chunk for rank p, as quartet's all_to_all table fills it (exact floats)."""
    return (float((q * n + p) % 8192 * 1024) + torch.arange(chunk, dtype=torch.int64) % 1024).to(torch.float32)


def all_to_all_worker(rank, args, torch, dist):
    """all_to_all_single of N equal chunks per size: warm-up, timed iterations, a check of
    every received element; rank 0 prints quartet's all_to_all columns."""
    n = args.ranks
    if rank == 0:
        print(f"# torch {torch.__version__} torch.distributed all_to_all_single (float32, equal chunks), "
              f"backend gloo, {n} rank{'' if n == 1 else 's'}, 127.0.0.1")
        print(f"# {args.iters} timed iterations per size after {args.warmup} warm-up; size: one rank's buffer, N "
              "chunks of size/N; time: the slowest rank's mean; busbw = algbw * (N-1)/N; every element received "
              "checked\n#")
        print("# %12s %12s %6s %6s %12s %12s %12s %6s" % ("size(B)", "count", "type", "redop", "time(us)",
                                                        "algbw(GB/s)", "busbw(GB/s)", "check"))
        sys.stdout.flush()
    busbw_sum, all_ok = 0.0, True
    for size in args.sizes:
        count = size // 4
        chunk = count // n
        send = torch.cat([a2a_values(torch, rank, p, n, chunk) for p in range(n)])
        recv = torch.empty(count, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_to_all_single(recv, send)
        recv.fill_(-1.0)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_to_all_single(recv, send)
        seconds = (time.perf_counter() - t0) / args.iters
        expect = torch.cat([a2a_values(torch, q, rank, n, chunk) for q in range(n)])
        wrong = int((recv != expect).sum())
        stats = torch.tensor([seconds, float(wrong)], dtype=torch.float64)
        gathered = [torch.zeros(2, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(gathered, stats)
        if rank == 0:
            slowest = max(float(g[0]) for g in gathered)
            total_wrong = int(sum(float(g[1]) for g in gathered))
            algbw = size / slowest / 1e9
            busbw = algbw * ((n - 1) / n if n > 1 else 0.0)
            busbw_sum += busbw
            all_ok = all_ok and total_wrong == 0
            print("  %12d %12d %6s %6s %12.1f %12.3f %12.3f %6s" % (size, count, "float", "none", slowest * 1e6,
                                                                   algbw, busbw, "ok" if total_wrong == 0 else "FAIL"))
            sys.stdout.flush()
    if rank == 0:
        print(f"# Avg bus bandwidth: {busbw_sum / len(args.sizes):.3f} GB/s over {len(args.sizes)} sizes")
    return all_ok


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback, as quartet's default
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    if args.op == "all_to_all":
        ok = all_to_all_worker(rank, args, torch, dist)
        dist.barrier()
        dist.destroy_process_group()
        if not ok:
            sys.exit(1)
        return
    n = args.ranks
    blocks = plan_blocks(args.iters, n)
    if rank == 0:
        print(f"# torch {torch.__version__} torch.distributed all_reduce (float32 sum, in place), "
              f"backend gloo, {n} rank{'' if n == 1 else 's'}, 127.0.0.1")
        print(f"# {args.iters} timed iterations per size after {args.warmup} warm-up; time: the slowest rank's "
              "mean; busbw = algbw * 2(N-1)/N; every element of every block of iterations checked\n#")
        print("# %12s %12s %6s %6s %12s %12s %12s %6s" % ("size(B)", "count", "type", "redop", "time(us)",
                                                        "algbw(GB/s)", "busbw(GB/s)", "check"))
        sys.stdout.flush()
    busbw_sum = 0.0
    all_ok = True
    for size in args.sizes:
        count = size // 4
        t = torch.zeros(count, dtype=torch.float32)
        pattern = (torch.arange(count, dtype=torch.int64) % 7 + 1).to(torch.float64)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        seconds, wrong = 0.0, 0
        for length, exponent in blocks:
            scale = 2.0 ** -exponent
            t.copy_((pattern * (rank + 1) * scale).to(torch.float32))
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(length):
                dist.all_reduce(t)
            seconds += time.perf_counter() - t0
            expect = pattern * (n * (n + 1) / 2.0 * float(n) ** (length - 1) * scale)
            err = (t.to(torch.float64) - expect).abs()
            wrong += int((~(err <= 1e-4 * expect)).sum())
        stats = torch.tensor([seconds / args.iters, float(wrong)], dtype=torch.float64)
        gathered = [torch.zeros(2, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(gathered, stats)
        if rank == 0:
            slowest = max(float(g[0]) for g in gathered)
            total_wrong = int(sum(float(g[1]) for g in gathered))
            algbw = size / slowest / 1e9
            busbw = algbw * (2.0 * (n - 1) / n if n > 1 else 0.0)
            busbw_sum += busbw
            ok = total_wrong == 0
            all_ok = all_ok and ok
            print("  %12d %12d %6s %6s %12.1f %12.3f %12.3f %6s" % (size, count, "float", "sum", slowest * 1e6, algbw,
                                                                   busbw, "ok" if ok else "FAIL"))
            if not ok:
                print(f"#   {total_wrong} wrong elements over all ranks")
            sys.stdout.flush()
    if rank == 0:
        print(f"# Avg bus bandwidth: {busbw_sum / len(args.sizes):.3f} GB/s over {len(args.sizes)} sizes")
    dist.barrier()
    dist.destroy_process_group()
    if not all_ok:
        sys.exit(1)


# ---------------------------------------------------------------------------------------
# One TCP stream on 127.0.0.1: the ceiling for moving bytes between two processes here.

def _receive_exactly(sock, view):
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:], len(view) - got)
        if n == 0:
            raise ConnectionError("peer closed")
        got += n


def _stream_peer(port, sizes, iters, warmup, both_ways, role, out):
    import threading
    if role == "listen":
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", port))
        srv.listen(1)
        out.put("listening")
        sock, _ = srv.accept()
        srv.close()
    else:
        sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    results = []
    for size in sizes:
        send_buf = memoryview(bytearray(size))
        recv_buf = memoryview(bytearray(size))
        sends = role == "connect" or both_ways
        receives = role == "listen" or both_ways
        for phase, count in (("warmup", warmup), ("timed", iters)):
            # A one-byte handshake lines the two ends up before each phase.
            if role == "connect":
                sock.sendall(b"g")
                _receive_exactly(sock, memoryview(bytearray(1)))
            else:
                _receive_exactly(sock, memoryview(bytearray(1)))
                sock.sendall(b"g")
            t0 = time.perf_counter()
            sender = None
            if sends and receives:
                sender = threading.Thread(target=lambda: [sock.sendall(send_buf) for _ in range(count)])
                sender.start()
                for _ in range(count):
                    _receive_exactly(sock, recv_buf)
                sender.join()
            elif sends:
                for _ in range(count):
                    sock.sendall(send_buf)
                _receive_exactly(sock, memoryview(bytearray(1)))  # the receiver has everything
            else:
                for _ in range(count):
                    _receive_exactly(sock, recv_buf)
                sock.sendall(b"d")
            elapsed = time.perf_counter() - t0
            if phase == "timed":
                results.append((size, elapsed / count))
    sock.close()
    out.put((role, results))


def tcp_baseline(args):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    print("# one TCP stream on 127.0.0.1 (Python sockets, TCP_NODELAY, default buffers): the ceiling")
    print(f"# {args.iters} timed transfers per size after {args.warmup} warm-up")
    print("# %12s %14s %14s" % ("size(B)", "one-way(GB/s)", "each-way(GB/s)"))
    rows = {}
    for both_ways in (False, True):
        port = free_port()
        q = ctx.Queue()
        listener = ctx.Process(target=_stream_peer, args=(port, args.sizes, args.iters, args.warmup, both_ways,
                                                           "listen", q))
        listener.start()
        assert q.get(timeout=60) == "listening"
        connector = ctx.Process(target=_stream_peer, args=(port, args.sizes, args.iters, args.warmup, both_ways,
                                                            "connect", q))
        connector.start()
        got = dict(q.get(timeout=600) for _ in range(2))
        listener.join()
        connector.join()
        for size, per in got["listen"]:
            rows.setdefault(size, {})[both_ways] = size / per / 1e9
    for size in args.sizes:
        print("  %12d %14.3f %14.3f" % (size, rows[size][False], rows[size][True]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", default="1M,16M,64M", help="bytes, comma-separated; K, M, G = 1024^n")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--op", choices=["all_reduce", "all_to_all"], default="all_reduce")
    p.add_argument("--tcp-baseline", action="store_true", help="measure one TCP stream instead of all-reduce")
    args = p.parse_args()
    args.sizes = parse_sizes(args.sizes)
    if args.ranks < 1 or args.iters < 1 or args.warmup < 0:
        raise SystemExit("--ranks and --iters must be at least 1, --warmup at least 0")
    if args.op == "all_to_all" and any(size % (4 * args.ranks) for size in args.sizes):
        raise SystemExit(f"--sizes: each size must split into {args.ranks} equal chunks of floats")
    if args.tcp_baseline:
        tcp_baseline(args)
        return
    import torch.multiprocessing as tmp
    tmp.spawn(worker, args=(args, free_port()), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()

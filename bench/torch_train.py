#!/usr/bin/python3
"""The PyTorch peer of quartet-bench-train: trains one model for a fixed number of steps
and prints one JSON line with samples/s and peak memory above the process's baseline.

Run it with Debian's /usr/bin/python3 (python3-torch). Set OPENBLAS_NUM_THREADS to the
thread count before starting it (bench/run does): torch's OpenMP pool and OpenBLAS's
pthread pool otherwise both take every core and fight.

The protocol matches bench/train.cpp: same models (docs/models.md), SGD with momentum
0.9, cross-entropy (per voxel for unet3d), a pool of pre-made random batches, each step's batch copied out of
the pool, `warmup` untimed steps, then `steps` timed ones.
"""

import argparse
import json
import os
import re
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=["mlp", "lenet5", "cnn", "resnet-mini", "resnet18", "conv3d-32", "conv3d-64", "unet3d-32", "unet3d-64", "unet3d-128", "gpt-mini"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    return p.parse_args()


args = parse_args()
# Must precede the import of torch, which loads OpenBLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from torch_models import build  # noqa: E402


def proc_status_kb(key):
    with open("/proc/self/status") as f:
        return int(re.search(key + r":\s+(\d+)", f.read()).group(1))


def reset_peak_rss():
    # Linux >= 4.0: writing 5 resets VmHWM to the current RSS.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    _, sample_shape, classes, label_shape = build(args.model)  # shapes only
    pool_size = 4
    tokens = args.model.startswith("gpt")  # byte values in, a label per position
    xs = [torch.randint(0, classes, (args.batch, *sample_shape)).float() if tokens
          else torch.randn(args.batch, *sample_shape) for _ in range(pool_size)]
    ys = [torch.randint(0, classes, (args.batch, *label_shape)) for _ in range(pool_size)]

    reset_peak_rss()
    base_kb = proc_status_kb("VmRSS")

    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if gpu:
        torch.cuda.reset_peak_memory_stats(device)
        base_gpu = torch.cuda.memory_allocated(device)
    model, _, _, _ = build(args.model)
    model.to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        x = xs[i % pool_size].clone().to(device)
        y = ys[i % pool_size].to(device)
        if tokens:
            y = y.reshape(-1)  # the model's logits are a row per position
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    if gpu:
        torch.cuda.synchronize(device)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(args.steps):
        loss = step(i)
    loss = float(loss.detach())  # waits for the GPU's queue on cuda
    seconds = time.perf_counter() - t0
    cpu_seconds = time.process_time() - cpu0

    peak_kb = proc_status_kb("VmHWM")
    print(json.dumps({
        "side": "torch",
        "model": args.model,
        "batch": args.batch,
        "threads": args.threads,
        "steps": args.steps,
        "seconds": seconds,
        "samples_per_s": args.steps * args.batch / seconds,
        # CPU seconds of all threads: with one thread, less disturbed by other work
        "samples_per_cpu_s": args.steps * args.batch / cpu_seconds,
        "rss_peak_mb": (peak_kb - base_kb) / 1024.0,
        "loss": loss,
        "device": args.device,
        "gpu_peak_mb": (torch.cuda.max_memory_allocated(device) - base_gpu) / 2**20 if gpu else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        # bench/run's name for the allocator setting it started this process with
        "malloc": os.environ.get("QUARTET_BENCH_MALLOC", "default"),
    }))


if __name__ == "__main__":
    sys.exit(main())

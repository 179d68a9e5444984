#!/usr/bin/python3
"""gpt-mini trained by PyTorch on the bytes a Quartet text-lm arm trained on, in the same
order, from the same initial weights, with the same optimizer and steps; prints the
validation bits per character each side reaches, and Quartet's final weights scored by
PyTorch (the two engines' evaluations of one model). The windows and the order come from
quartet-bench-text-data, the weights from the run folder.

    /usr/bin/python3 bench/torch_text_lm.py RUN --arm single --build build

RUN is a `quartet run` folder of a text-lm experiment (experiments/text-lm.json); the
arm must be a single one (constant learning rate; sgd, adam or adamw).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import build  # noqa: E402
from torch_parity import read_safetensors  # noqa: E402

CONTEXT = 128


def windows(path):
    raw = open(path, "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(-1, CONTEXT + 1).long()


def bpc(model, val, batch):
    model.eval()
    nats = 0.0
    with torch.no_grad():
        for i in range(0, len(val), batch):
            w = val[i:i + batch]
            logits = model(w[:, :CONTEXT].float())
            nats += float(torch.nn.functional.cross_entropy(logits, w[:, 1:].reshape(-1), reduction="sum"))
    model.train()
    return nats / (len(val) * CONTEXT) / math.log(2)


def optimizer(params, o):
    if o["name"] == "sgd":
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], nesterov=o["nesterov"],
                               weight_decay=o["weight_decay"])
    kind = torch.optim.AdamW if o["name"] == "adamw" else torch.optim.Adam
    return kind(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["weight_decay"])


def quartet_bpc(run, arm):
    """The arm's last evaluation, from its records."""
    last = None
    for line in open(os.path.join(run, arm, "roles", "trainer.jsonl")):
        r = json.loads(line)
        if "eval" in r:
            last = r["eval"]["value"]
    return last


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--arm", default="single")
    p.add_argument("--build", default="build", help="the build folder with bench/quartet-bench-text-data")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    spec = json.load(open(os.path.join(args.run, "spec.json")))["spec"]
    arm = next(a for a in spec["arms"] if a["name"] == args.arm)
    if arm["regime"] != "single":
        sys.exit(f"--arm {args.arm}: its regime is {arm['regime']}; compare a single arm")
    train, wl = arm["train"], spec["workload"]
    if train["schedule"]["name"] != "constant":
        sys.exit(f"--arm {args.arm}: schedule {train['schedule']['name']}; only a constant rate is reproduced here")

    with tempfile.TemporaryDirectory() as work:
        cmd = [os.path.join(args.build, "bench", "quartet-bench-text-data"), "--seed", str(spec["seed"]),
               "--train-samples", str(wl["train_samples"]), "--test-samples", str(wl["test_samples"]),
               "--epochs", str(train["epochs"]), "--out", work]
        if wl.get("data_dir"):
            cmd += ["--data-dir", wl["data_dir"]]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        data, val = windows(os.path.join(work, "train.u8")), windows(os.path.join(work, "val.u8"))
        order = torch.frombuffer(bytearray(open(os.path.join(work, "order.i64"), "rb").read()), dtype=torch.int64)

    model, _, _, _ = build("gpt-mini")
    model.load_state_dict(read_safetensors(os.path.join(args.run, "init.safetensors")))
    opt = optimizer(model.parameters(), train["optimizer"])
    n, b = len(data), train["batch"]
    steps = train["epochs"] * (n // b)
    if train["max_steps"]:
        steps = min(steps, train["max_steps"])
    t0 = time.perf_counter()
    for s in range(steps):
        epoch, k = divmod(s, n // b)
        w = data[order[epoch * n + k * b: epoch * n + (k + 1) * b]]
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(w[:, :CONTEXT].float()), w[:, 1:].reshape(-1)).backward()
        opt.step()
    seconds = time.perf_counter() - t0
    ours_by_torch = build("gpt-mini")[0]
    ours_by_torch.load_state_dict(read_safetensors(os.path.join(args.run, args.arm, "final.safetensors")))
    batch = min(train["eval_batch"], 64)
    print(f"gpt-mini on text-lm: {n} windows, {steps} steps of {b}, {train['optimizer']['name']} "
          f"lr {train['optimizer']['lr']}, {len(val)} validation windows; torch {torch.__version__}")
    print(f"bits per character: Quartet {quartet_bpc(args.run, args.arm):.6f} (its evaluation), "
          f"{bpc(ours_by_torch, val, batch):.6f} (its final weights scored by PyTorch); "
          f"PyTorch trained the same way {bpc(model, val, batch):.6f} ({steps * b / seconds:.1f} samples/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

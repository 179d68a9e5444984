#!/usr/bin/python3
"""The cost of running a network imported from ONNX against the same network built from
the engine's modules: resnet-mini (bench/torch_models.py's PyTorch twin of the built-in
model) exported from PyTorch, then quartet-bench-train on the built-in `resnet-mini` and
on `onnx:resnet_mini.onnx`, the same batch, threads and steps, one after the other, a
few rounds. Prints each side's samples/s and the import's speed as a share of the
built-in's (1.0: no overhead).

    /usr/bin/python3 bench/onnx_speed.py --train build/bench/quartet-bench-train
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import build  # noqa: E402


def samples_per_s(train, model, args):
    out = subprocess.run([train, "--model", model, "--batch", str(args.batch), "--threads", str(args.threads),
                          "--steps", str(args.steps), "--warmup", "3"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"quartet-bench-train --model {model} failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="the quartet-bench-train binary")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    model, sample, _, _ = build("resnet-mini")
    model.eval()
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "resnet_mini.onnx")
        torch.onnx.export(model, torch.rand(1, *sample), path, input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=13,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
        built, imported = [], []
        for _ in range(args.rounds):  # alternated, so a busy spell of the machine hits both
            built.append(samples_per_s(args.train, "resnet-mini", args))
            imported.append(samples_per_s(args.train, "onnx:" + path, args))
    b, i = max(built), max(imported)
    print(f"resnet-mini, batch {args.batch}, {args.threads} threads, {args.steps} steps, best of {args.rounds}:")
    print(f"  built from engine modules: {b:.1f} samples/s  (rounds: {', '.join(f'{v:.1f}' for v in built)})")
    print(f"  imported from ONNX:        {i:.1f} samples/s  (rounds: {', '.join(f'{v:.1f}' for v in imported)})")
    print(f"  imported / built: {i / b:.3f}")


if __name__ == "__main__":
    main()

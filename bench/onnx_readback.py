#!/usr/bin/env python3
"""An ONNX file that Quartet exported, read back by another reader: onnxruntime. For the
tiny residual CNN of tests/data/onnx and for torchvision's ResNet-18 (the file
bench/onnx_resnet18_fashion.py writes), it trains the model a few steps with `quartet
run` (synthetic 1 x 28 x 28 images, the single regime, SGD with momentum, so weights and
BatchNorm's running statistics move), writes the trained graph with `quartet export
RUN/single --onnx`, checks that the file's initializers are the run's final weights,
then runs one batch through the file under onnxruntime and under Quartet
(quartet-bench-step --forward: eval mode, BatchNorm's running statistics) and prints the
largest absolute difference of the logits and that difference over the largest logit.
Exits 1 when one passes --tolerance (relative).

    bench/onnxruntime-venv        (once: onnxruntime into deps/onnxruntime-venv)
    $(bench/onnxruntime-venv --print) bench/onnx_readback.py --build build

It needs onnxruntime, numpy and the onnx package, and torch to write ResNet-18's file
when it is missing: the venv above sees Debian's python3-torch and python3-onnx.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from torch_parity import read_safetensors  # noqa: E402
from torch_step_parity import write_safetensors  # noqa: E402

MODELS = {
    "tiny-cnn": os.path.join(ROOT, "tests", "data", "onnx", "tiny_cnn.onnx"),
    "resnet18": os.path.join(ROOT, "models", "resnet18-fashion.onnx"),
}


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}): {(out.stderr or out.stdout).strip()}")
    return out.stdout


def read_back(name, path, args, work):
    quartet = os.path.join(args.build, "quartet")
    step = os.path.join(args.build, "bench", "quartet-bench-step")
    spec = os.path.join(work, f"{name}.json")
    with open(spec, "w") as f:
        json.dump({"name": name, "seed": 1,
                   "workload": {"name": "synthetic", "model": "onnx:" + path,
                                "train_samples": args.steps * args.train_batch, "test_samples": 32},
                   "train": {"epochs": 1, "batch": args.train_batch,
                             "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}},
                   "arms": [{"name": "single", "regime": "single"}]}, f)
    run_dir = os.path.join(work, f"{name}-run")
    run([quartet, "run", spec, "--out", run_dir, "--progress=none"])
    exported = os.path.join(work, f"{name}-trained.onnx")
    run([quartet, "export", os.path.join(run_dir, "single"), "--onnx", exported])

    # The file's initializers are the run's final weights ("<stage>.<initializer>").
    final = {k.split(".", 1)[1]: v.numpy() for k, v in read_safetensors(
        os.path.join(run_dir, "single", "final.safetensors")).items()}
    graph = onnx.load(exported).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    missing = [k for k in final if k not in inits]
    if missing:
        sys.exit(f"{name}: the exported file lacks {missing[:3]}")
    if any(not np.array_equal(inits[k], v) for k, v in final.items()):
        sys.exit(f"{name}: the exported initializers are not the run's final weights")
    source = onnx.load(path).graph
    first = {t.name: numpy_helper.to_array(t) for t in source.initializer}
    for n in source.node:  # PyTorch's exporter names equal initializers through Identity nodes
        if n.op_type == "Identity" and n.input[0] in first:
            first[n.output[0]] = first[n.input[0]]
    moved = sum(not np.array_equal(first[k], v) for k, v in final.items())

    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = onnxruntime.InferenceSession(exported, options, providers=["CPUExecutionProvider"])
    ort = session.run(None, {session.get_inputs()[0].name: x})[0]

    case, logits = os.path.join(work, f"{name}-case.safetensors"), os.path.join(work, f"{name}-logits.safetensors")
    write_safetensors(case, {"batch.x": torch.from_numpy(x)})
    run([step, case, "--model", "onnx:" + exported, "--forward", "--out", logits])
    ours = read_safetensors(logits)["logits"].numpy()
    if ours.shape != ort.shape:
        sys.exit(f"{name}: quartet's logits are {ours.shape}, onnxruntime's {ort.shape}")
    diff = float(np.abs(ours.astype(np.float64) - ort).max())
    rel = diff / float(np.abs(ort).max())
    print(f"{name:9} {len(final):7} {moved:7}  {args.batch:>4} x {ort.shape[1]:<4} {diff:14.2e} {rel:12.2e}")
    return rel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build folder (quartet, bench/)")
    p.add_argument("--models", default="tiny-cnn,resnet18", help="comma-separated: " + ", ".join(MODELS))
    p.add_argument("--steps", type=int, default=4, help="training steps before the export")
    p.add_argument("--train-batch", type=int, default=16)
    p.add_argument("--batch", type=int, default=16, help="images in the batch compared")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime's threads")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-5)
    args = p.parse_args()

    print(f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}; {args.steps} steps of "
          f"{args.train_batch} before the export")
    # tensors: the run's trained tensors (parameters and buffers), all found in the exported
    # file; moved: those that training changed from the source file's values.
    print(f"{'model':9} {'tensors':>7} {'moved':>7}  {'logits':11} {'max |q - ort|':>14} {'/ max |ort|':>12}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            if name not in MODELS:
                sys.exit(f"--models: unknown model '{name}'; known: {', '.join(MODELS)}")
            path = MODELS[name]
            if not os.path.exists(path):
                run([sys.executable, os.path.join(HERE, "onnx_resnet18_fashion.py"), "--out", path])
            worst = max(worst, read_back(name, path, args, work))
    print(f"largest difference over the largest logit: {worst:.2e} (tolerance {args.tolerance:g})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

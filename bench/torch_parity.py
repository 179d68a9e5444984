#!/usr/bin/python3
"""Checks that bench/torch_models.py's networks are Quartet's: trains each model briefly
with Quartet, loads its final.safetensors into the PyTorch definition by parameter name
(strict: every name and shape must match), and compares what each side computes with
the same weights: the Fashion-MNIST test predictions (mlp, lenet5, cnn, cnn-wide,
resnet-mini in eval mode: correct counts) or the voxel labels `quartet predict` writes
for a 32^3 CT phantom (unet3d, one window), or the text `quartet sample --temperature 0`
writes (gpt-mini, trained briefly on text-lm: every greedy byte). Prints one table; exits
1 on a mismatch.

    /usr/bin/python3 bench/torch_parity.py --quartet build/quartet [--models mlp,lenet5,unet3d]

Run it with Debian's /usr/bin/python3 (python3-torch). Needs dataset-fashion-mnist.
"""

import argparse
import gzip
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import build  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # workloads/dataset.h


def read_safetensors(path):
    """name -> float32 tensor, from the format's 8-byte header length, JSON header, data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}, expected F32")
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"])
    return out


def test_set():
    with gzip.open(f"{DATA}/t10k-images-idx3-ubyte.gz") as f:
        raw = f.read()
    images = torch.frombuffer(bytearray(raw[16:]), dtype=torch.uint8).reshape(-1, 1, 28, 28).float()
    with gzip.open(f"{DATA}/t10k-labels-idx1-ubyte.gz") as f:
        labels = torch.frombuffer(bytearray(f.read()[8:]), dtype=torch.uint8).long()
    return (images / 255.0 - MEAN) / STD, labels


def read_nifti(path):
    """(data as a float tensor (z, y, x), datatype code) of a NIfTI-1 file, gzipped or not."""
    raw = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    dims = struct.unpack("<8h", raw[40:56])
    datatype = struct.unpack("<h", raw[70:72])[0]
    offset = int(struct.unpack("<f", raw[108:112])[0])
    dtype = {2: torch.uint8, 16: torch.float32}[datatype]
    nx, ny, nz = dims[1], dims[2], dims[3]
    data = torch.frombuffer(bytearray(raw[offset:]), dtype=dtype)[: nx * ny * nz]
    return data.reshape(nz, ny, nx).float()


def quartet_weights(quartet, model, work):
    if model == "unet3d":
        workload = {"name": "phantom-ct-seg", "model": "unet3d", "volumes": 4, "test_volumes": 1,
                    "volume_size": 32, "patch": 32}
        train = {"epochs": 1, "batch": 1, "max_steps": 3, "optimizer": {"name": "adam", "lr": 0.003}}
    elif model == "gpt-mini":
        workload = {"name": "text-lm", "model": "gpt-mini", "train_samples": 512, "test_samples": 16}
        train = {"epochs": 1, "batch": 16, "max_steps": 30, "optimizer": {"name": "adamw", "lr": 0.003}}
    else:
        workload = {"name": "fashion-mnist", "model": model}
        train = {"epochs": 1, "batch": 64, "max_steps": 60,
                 "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}}
    spec = {"name": f"parity-{model}", "workload": workload, "seed": 3, "threads": 1, "train": train,
            "arms": [{"name": "single", "regime": "single"}]}
    spec_path = os.path.join(work, f"{model}.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    run = os.path.join(work, model)
    subprocess.run([quartet, "run", spec_path, "--out", run, "--progress=none"], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(run, "single", "final.safetensors")


def quartet_accuracy(quartet, model, weights):
    out = subprocess.run([quartet, "eval", weights, "--workload", "fashion-mnist", "--model", model],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"accuracy ([0-9.]+) on (\d+) test samples", out)
    if not m:
        raise SystemExit(f"quartet eval printed no accuracy: {out!r}")
    return round(float(m.group(1)) * int(m.group(2))), int(m.group(2))


def unet3d_row(quartet, weights, work):
    """Voxels on which `quartet predict` and PyTorch's argmax agree, for one 32^3 phantom."""
    phantoms = os.path.join(work, "phantoms")
    subprocess.run([quartet, "phantom", "--kind", "ct", "--count", "1", "--size", "32", "--out", phantoms,
                    "--seed", "11"], check=True, stdout=subprocess.DEVNULL)
    image = os.path.join(phantoms, "imagesTr", sorted(os.listdir(os.path.join(phantoms, "imagesTr")))[0])
    mask = os.path.join(work, "mask.nii.gz")
    subprocess.run([quartet, "predict", weights, image, "--out", mask, "--kind", "ct", "--patch", "32"],
                   check=True, stdout=subprocess.DEVNULL)
    ours = read_nifti(mask).long()
    hu = read_nifti(image)
    x = ((hu - (40.0 - 200.0)) / 400.0).clamp(0.0, 1.0)  # the abdominal window: centre 40, width 400
    net, _, _, _ = build("unet3d-32")
    state = read_safetensors(weights)
    net.load_state_dict(state, strict=True)
    net.eval()
    with torch.no_grad():
        theirs = net(x[None, None]).argmax(1)[0]
    # A constant mask would agree trivially: the check needs every class predicted somewhere.
    counts = torch.bincount(ours.flatten(), minlength=3).tolist()
    print(f"# unet3d: Quartet's labels per class {counts}", file=sys.stderr)
    if min(counts) == 0:
        raise SystemExit(f"unet3d: Quartet predicted only classes {counts}; train longer for a meaningful check")
    return sum(t.numel() for t in state.values()), int((theirs == ours).sum()), ours.numel()


def gpt_row(quartet, weights, prompt="The ", length=80):
    """Bytes on which `quartet sample --temperature 0` and PyTorch's greedy choice agree."""
    out = subprocess.run([quartet, "sample", weights, "--prompt", prompt, "--length", str(length),
                          "--temperature", "0"], check=True, capture_output=True).stdout
    ours = out[len(prompt):len(prompt) + length]
    net, _, _, _ = build("gpt-mini")
    state = read_safetensors(weights)
    net.load_state_dict(state, strict=True)
    net.eval()
    text = list(prompt.encode())
    with torch.no_grad():
        for _ in range(length):
            window = torch.tensor(text[-128:], dtype=torch.float32)[None]
            text.append(int(net(window)[-1].argmax()))
    theirs = bytes(text[len(prompt):])
    print(f"# gpt-mini: Quartet's greedy continuation of {prompt!r}: {ours!r}", file=sys.stderr)
    same = sum(a == b for a, b in zip(ours, theirs))
    return sum(t.numel() for t in state.values()), same, length


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quartet", default="build/quartet")
    p.add_argument("--models", default="mlp,lenet5,cnn,cnn-wide,resnet-mini,unet3d,gpt-mini")
    args = p.parse_args()
    torch.set_num_threads(1)
    x, y = test_set()
    ok = True
    print("| model | floats loaded | Quartet | PyTorch, same weights | agree |")
    print("| --- | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models.split(","):
            weights = quartet_weights(args.quartet, model, work)
            if model == "gpt-mini":
                params, same, n = gpt_row(args.quartet, weights)
                ok = ok and same == n
                print(f"| gpt-mini | {params:,} | greedy text, {n} bytes | {same} bytes the same | "
                      f"{'yes' if same == n else 'NO'} |")
                continue
            if model == "unet3d":
                params, same, voxels = unet3d_row(args.quartet, weights, work)
                ok = ok and same == voxels
                print(f"| unet3d | {params:,} | labels of {voxels} voxels | {same} voxels the same | "
                      f"{'yes' if same == voxels else 'NO'} |")
                continue
            net, _, _, _ = build(model)
            state = read_safetensors(weights)
            # PyTorch's BatchNorm keeps num_batches_tracked, which Quartet does not
            # (docs/models.md, BatchNorm buffers): added as zeros, as the docs say to.
            for key in net.state_dict():
                if key.endswith("num_batches_tracked"):
                    state[key] = torch.zeros((), dtype=torch.long)
            net.load_state_dict(state, strict=True)  # every name and shape, both ways
            net.eval()
            with torch.no_grad():
                correct = sum(int((net(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                              for i in range(0, len(y), 1000))
            theirs, n = quartet_accuracy(args.quartet, model, weights)
            agree = theirs == correct and n == len(y)
            ok = ok and agree
            params = sum(t.numel() for k, t in state.items() if not k.endswith("num_batches_tracked"))
            print(f"| {model} | {params:,} | {theirs} / {n} correct | {correct} / {len(y)} correct | "
                  f"{'yes' if agree else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""One SGD step of gpt-mini (or gpt-moe) in Quartet against a float64 PyTorch reference, from one
safetensors file: PyTorch's initialisation of bench/torch_models.py's Gpt and a batch of
random bytes, written once; quartet-bench-step takes the step in float32 and PyTorch in
float64 from the same file. Prints each tensor's relative error, ||quartet - reference|| /
||reference||, for the parameters after the step and for their gradients (the norm of
Quartet's where the reference gradient is zero); exits 1 when a parameter's passes
--tolerance.

    /usr/bin/python3 bench/torch_step_parity.py --step build/bench/quartet-bench-step
    /usr/bin/python3 bench/torch_step_parity.py --step build/bench/quartet-bench-step --model gpt-moe

gpt-moe's reference minimises the cross-entropy plus its load-balancing losses, as
Quartet's backward does (the printed losses are the cross-entropy alone).

Run it with Debian's /usr/bin/python3 (python3-torch) or a newer torch.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import build  # noqa: E402
from torch_parity import read_safetensors  # noqa: E402


def write_safetensors(path, tensors):
    """name -> tensor, as F32, in the order given."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def rel(a, b):
    return float((a.double() - b).norm() / b.norm()) if float(b.norm()) > 0 else float((a.double() - b).norm())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step", required=True, help="the quartet-bench-step binary")
    p.add_argument("--model", default="gpt-mini", choices=["gpt-mini", "gpt-moe"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-5)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    model, sample, vocab, _ = build(args.model)
    x = torch.randint(0, vocab, (args.batch, *sample)).float()
    y = torch.randint(0, vocab, (args.batch * sample[0],))
    with tempfile.TemporaryDirectory() as work:
        case, after = os.path.join(work, "case.safetensors"), os.path.join(work, "after.safetensors")
        write_safetensors(case, {**model.state_dict(), "batch.x": x, "batch.y": y.float()})
        out = subprocess.run([args.step, case, "--model", args.model, "--lr", str(args.lr), "--out", after],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"quartet-bench-step failed: {out.stderr.strip()}")
        ours = read_safetensors(after)

    ref = model.double()
    loss = torch.nn.functional.cross_entropy(ref(x.double()), y)
    (loss + ref.aux_losses() if hasattr(ref, "aux_losses") else loss).backward()
    worst, rows = 0.0, []
    with torch.no_grad():
        for name, param in ref.named_parameters():
            grad = param.grad.clone()
            param -= args.lr * grad
            e_param = rel(ours[name], param)
            # The key biases' gradient is zero by the maths (softmax ignores what q . b_k
            # adds to every score of a row): only float noise is left to compare.
            zero = float(grad.norm()) < 1e-12
            e_grad = float(ours["grad." + name].double().norm()) if zero else rel(ours["grad." + name], grad)
            worst = max(worst, e_param)
            rows.append((name, e_param, e_grad, zero))
    print(f"{args.model}, batch {args.batch} x {sample[0]} bytes, SGD lr {args.lr}, torch {torch.__version__}")
    print(f"loss: quartet {float(ours['loss']):.9f}, float64 reference {float(loss.detach()):.9f}")
    print(f"{'tensor':32} {'params after':>14} {'gradient':>10}")
    for name, e_param, e_grad, zero in rows:
        print(f"{name:32} {e_param:14.2e} {e_grad:10.2e}" + ("  (zero in the reference: ||quartet's||)" if zero else ""))
    print(f"largest relative error of a parameter after the step: {worst:.2e} (tolerance {args.tolerance:g}); "
          f"of a gradient that is not zero: {max(r[2] for r in rows if not r[3]):.2e}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

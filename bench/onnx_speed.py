#!/usr/bin/python3
"""The cost of running a network imported from ONNX against the same network built from
the engine's modules, beside PyTorch. For resnet-mini (the built-in model and
bench/torch_models.py's PyTorch twin) and for torchvision's ResNet-18 (CIFAR-sized
3 x 32 x 32 input, 10 classes: workloads::make_resnet18 and torch_models.ResNet18), the
PyTorch model is exported to ONNX, then quartet-bench-train times the built model and
`onnx:` the file, the same batch, threads and steps, alternately for a few rounds, and
bench/torch_train.py times PyTorch on the same network (jemalloc preloaded, as
bench/torch_malloc.sh sets it, when Debian's libjemalloc2 is there). Prints each side's
samples/s (the best round), the import's speed as a share of the built model's (1.0: no
overhead), the load average, our build's ISA and conv kernel policy, and the CPU's ISA.

    /usr/bin/python3 bench/onnx_speed.py --train build/bench/quartet-bench-train
    /usr/bin/python3 bench/onnx_speed.py --train build/bench/quartet-bench-train --models resnet18 --threads 1
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_models import build  # noqa: E402


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_isa():
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE2"


def jemalloc_env():
    """bench/torch_malloc.sh's environment for jemalloc; empty when it is not installed."""
    out = subprocess.run(["bash", "-c", f"source {HERE}/torch_malloc.sh && torch_malloc_env jemalloc"],
                         capture_output=True, text=True)
    return dict(line.split("=", 1) for line in out.stdout.split()) if out.returncode == 0 else {}


def ours(train, model, args):
    out = subprocess.run([train, "--model", model, "--batch", str(args.batch), "--threads", str(args.threads),
                          "--steps", str(args.steps), "--warmup", str(args.warmup)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"quartet-bench-train --model {model} failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_side(model, args, env):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_train.py"), "--model", model, "--batch",
                          str(args.batch), "--threads", str(args.threads), "--steps", str(args.steps), "--warmup",
                          str(args.warmup)], capture_output=True, text=True,
                         env={**os.environ, **env, "OPENBLAS_NUM_THREADS": str(args.threads),
                              "QUARTET_BENCH_MALLOC": "jemalloc" if env else "default"})
    if out.returncode != 0:
        sys.exit(f"torch_train.py --model {model} failed: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def rounds_text(values):
    return ", ".join(f"{v:.1f}" for v in values)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="the quartet-bench-train binary")
    p.add_argument("--models", default="resnet-mini,resnet18", help="comma-separated: resnet-mini, resnet18")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    args = p.parse_args()

    env = jemalloc_env()
    print(f"# load average before: {load()}; batch {args.batch}, {args.threads} thread(s), {args.steps} steps "
          f"after {args.warmup}, best of {args.rounds} alternated rounds; torch {torch.__version__} "
          f"(malloc: {'jemalloc' if env else 'default'})")
    isa = policy = None
    for name in args.models.split(","):
        if name not in ("resnet-mini", "resnet18"):
            sys.exit(f"--models: unknown model '{name}'; known: resnet-mini, resnet18")
        model, sample, _, _ = build(name)
        model.eval()
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, f"{name}.onnx")
            torch.onnx.export(model, torch.rand(1, *sample), path, input_names=["image"], output_names=["logits"],
                              dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}}, opset_version=13,
                              training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
            runs = {"built": [], "imported": [], "torch": []}
            for _ in range(args.rounds):  # alternated, so a busy spell of the machine hits every side
                b = ours(args.train, name, args)
                runs["built"].append(b)
                runs["imported"].append(ours(args.train, "onnx:" + path, args))
                if not args.no_torch:
                    runs["torch"].append(torch_side(name, args, env))
                isa, policy = b.get("isa"), b.get("conv_kernel")
        # Wall-clock samples/s, and per CPU second: the latter is what other work sharing
        # the cores disturbs least (with one thread, close to a quiet machine's wall figure).
        best = {side: (max(r["samples_per_s"] for r in rs), max(r["samples_per_cpu_s"] for r in rs))
                for side, rs in runs.items() if rs}
        print(f"{name} ({'x'.join(map(str, sample))} input), best round, samples/s (per CPU second):")
        labels = {"built": "built from engine modules", "imported": "imported from ONNX", "torch": "PyTorch"}
        for side, (wall, cpu) in best.items():
            rounds = rounds_text([r["samples_per_s"] for r in runs[side]])
            print(f"  {labels[side] + ':':27} {wall:8.1f} ({cpu:8.1f})  rounds: {rounds}")
        ratio = best["imported"][0] / best["built"][0], best["imported"][1] / best["built"][1]
        print(f"  imported / built: {ratio[0]:.3f} ({ratio[1]:.3f} per CPU second)" +
              (f"; built / PyTorch: {best['built'][0] / best['torch'][0]:.3f} "
               f"({best['built'][1] / best['torch'][1]:.3f})" if "torch" in best else ""))
    print(f"# load average after: {load()}; ours built for {isa}, conv kernel policy {policy}; this CPU has {cpu_isa()}")


if __name__ == "__main__":
    main()

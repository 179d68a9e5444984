#!/usr/bin/python3
"""Side by side: `quartet bench-collectives --op all_to_all` (Gloo, or shm) and PyTorch's
torch.distributed all_to_all_single (Gloo), each run --repeats times per rank count,
alternating, so that a noisy shared machine hits both alike. Prints the median and the
spread of busbw per rank count and size, and quartet's median over PyTorch's.

    /usr/bin/python3 bench/compare_all_to_all.py --quartet build/quartet --ranks 2,4 --repeats 5

Both fill a rank's buffer of a size with N equal chunks, one for each rank, and check
every element received; busbw = algbw * (N-1)/N (nccl-tests' alltoall).
"""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_allreduce import run, table_rows  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quartet", default="build/quartet", help="the quartet binary")
    p.add_argument("--backend", default="gloo", choices=["gloo", "shm"], help="quartet's backend")
    p.add_argument("--ranks", default="2,4", help="rank counts, comma-separated")
    p.add_argument("--sizes", default="1M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    counts = [int(r) for r in args.ranks.split(",")]

    common = ["--sizes", args.sizes, "--iters", str(args.iters)]
    results = {}  # (ranks, name) -> size -> [busbw]
    failures = 0
    for r in range(args.repeats):
        for n in counts:
            ours = run([args.quartet, "bench-collectives", "--op", "all_to_all", "--backend", args.backend,
                        "--ranks", str(n)] + common)
            theirs = run([sys.executable, os.path.join(HERE, "torch_allreduce.py"), "--op", "all_to_all",
                          "--ranks", str(n)] + common)
            for name, text in ((f"quartet {args.backend}", ours), ("torch gloo", theirs)):
                for size, busbw, check in table_rows(text):
                    results.setdefault((n, name), {}).setdefault(size, []).append(busbw)
                    failures += check != "ok"
        print(f"# repeat {r + 1}/{args.repeats} done", file=sys.stderr)

    names = [f"quartet {args.backend}", "torch gloo"]
    print(f"# all-to-all busbw (GB/s) on 127.0.0.1, median of {args.repeats} runs [min..max]; {args.iters} "
          "iterations per run; ratio: quartet's median / torch's")
    print("# %5s %10s" % ("ranks", "size(B)") + "".join("  %24s" % n for n in names) + "  %7s" % "ratio")
    for n in counts:
        for size in sorted(results.get((n, names[0]), {})):
            medians, cells = [], []
            for name in names:
                v = results.get((n, name), {}).get(size, [])
                medians.append(statistics.median(v) if v else 0.0)
                cells.append("  %24s" % (f"{medians[-1]:.3f} [{min(v):.2f}..{max(v):.2f}]" if v else "-"))
            ratio = medians[0] / medians[1] if medians[1] > 0 else float("nan")
            print("  %5d %10d" % (n, size) + "".join(cells) + "  %7.2f" % ratio)
    if failures:
        print(f"# {failures} rows had a FAILED check")
        sys.exit(1)


if __name__ == "__main__":
    main()

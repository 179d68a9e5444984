#!/usr/bin/python3
"""Side by side: `quartet bench-collectives` (Gloo), PyTorch's torch.distributed (Gloo)
and one TCP stream on 127.0.0.1, each run --repeats times, alternating, so that a noisy
shared machine hits all of them alike. Prints the median and the spread of busbw per size.

    /usr/bin/python3 bench/compare_allreduce.py --quartet build/quartet --ranks 2 --repeats 5
"""

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def table_rows(text):
    """(size, busbw, check) of every result row of an nccl-tests-style table."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[0].isdigit():
            rows.append((int(parts[0]), float(parts[6]), parts[7]))
    return rows


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"{' '.join(cmd)}: exit code {out.returncode}")
    return out.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quartet", default="build/quartet", help="the quartet binary")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sizes", default="1M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--also", action="append", default=[], metavar="VAR=VALUE",
                   help="also run quartet with this environment variable set (repeatable), "
                        "e.g. QUARTET_GLOO_SEGMENT_BYTES=1048576")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-tcp", action="store_true")
    args = p.parse_args()

    common = ["--sizes", args.sizes, "--iters", str(args.iters)]
    results = {"quartet": {}}
    for extra in args.also:
        results[f"quartet {extra}"] = {}
    results.update({"torch": {}, "tcp one-way": {}, "tcp each-way": {}})
    failures = 0
    for r in range(args.repeats):
        ours = run([args.quartet, "bench-collectives", "--backend", "gloo", "--ranks", str(args.ranks)] + common)
        for size, busbw, check in table_rows(ours):
            results["quartet"].setdefault(size, []).append(busbw)
            failures += check != "ok"
        for extra in args.also:
            var, _, value = extra.partition("=")
            env = dict(os.environ, **{var: value})
            out = run([args.quartet, "bench-collectives", "--backend", "gloo", "--ranks", str(args.ranks)] + common,
                      env=env)
            for size, busbw, check in table_rows(out):
                results[f"quartet {extra}"].setdefault(size, []).append(busbw)
                failures += check != "ok"
        if not args.no_torch:
            theirs = run([sys.executable, os.path.join(HERE, "torch_allreduce.py"), "--ranks", str(args.ranks)] + common)
            for size, busbw, check in table_rows(theirs):
                results["torch"].setdefault(size, []).append(busbw)
                failures += check != "ok"
        if not args.no_tcp:
            tcp = run([sys.executable, os.path.join(HERE, "torch_allreduce.py"), "--tcp-baseline"] + common)
            for line in tcp.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[0].isdigit():
                    results["tcp one-way"].setdefault(int(parts[0]), []).append(float(parts[1]))
                    results["tcp each-way"].setdefault(int(parts[0]), []).append(float(parts[2]))
        print(f"# repeat {r + 1}/{args.repeats} done", file=sys.stderr)

    print(f"# all-reduce busbw (GB/s), {args.ranks} ranks on 127.0.0.1, median of {args.repeats} runs "
          f"[min..max]; {args.iters} iterations per run. tcp: one stream's GB/s (the ceiling)")
    sizes = sorted(results["quartet"])
    for i, name in enumerate(n for n, v in results.items() if v):
        print(f"# column {i + 1}: {name}")
    print("# %10s" % "size(B)" + "".join("  %24s" % f"column {i + 1}" for i, (n, v) in
                                         enumerate((n, v) for n, v in results.items() if v)))
    for size in sizes:
        cells = []
        for name, by_size in results.items():
            if not by_size:
                continue
            v = by_size.get(size, [])
            cells.append("  %24s" % (f"{statistics.median(v):.3f} [{min(v):.2f}..{max(v):.2f}]" if v else "-"))
        print("  %10d" % size + "".join(cells))
    if failures:
        print(f"# {failures} rows had a FAILED check")
        sys.exit(1)


if __name__ == "__main__":
    main()

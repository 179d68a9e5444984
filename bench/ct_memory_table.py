#!/usr/bin/python3
"""Peak memory per process against patch size, from a finished run of
experiments/ct-memory.json (or any run whose arms set `patch`). Standard library only.

    build/quartet run experiments/ct-memory.json --out results/ct-memory --progress none
    python3 bench/ct_memory_table.py results/ct-memory

One row per arm kind (the arm's name less its "-<patch>" suffix) and process, one
column pair per patch size: the peak tracked memory (every tag, training only) and the
peak resident set (the process's, evaluation and the dataset included), in MiB; then
the activations' share of the tracked peak and the train seconds per step.
"""

import argparse
import json
import os
import re
import sys

MIB = 1024 * 1024


def load(run_dir):
    with open(os.path.join(run_dir, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)["spec"]
    default_patch = spec["workload"].get("patch")
    rows = {}  # (kind, role) -> {patch: cell}
    kinds, patches = [], []
    for arm in spec["arms"]:
        path = os.path.join(run_dir, arm["name"], "summary.json")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
        patch = arm.get("patch", default_patch)
        kind = re.sub(r"-%d$" % patch, "", arm["name"])
        if kind not in kinds:
            kinds.append(kind)
        if patch not in patches:
            patches.append(patch)
        mem = s["memory_peak_bytes"]
        steps = max(s.get("steps", 0), 1)
        for role, m in sorted(mem["by_role"].items()):
            rows.setdefault((kind, role), {})[patch] = {
                "tracked": m["total"] / MIB,
                "rss": m["rss"] / MIB,
                "activations": mem["by_tag"].get("activations", 0) / MIB,
                "step_s": s["train_seconds"] / steps,
                "status": s.get("status", "?"),
            }
    patches.sort()
    return kinds, patches, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    args = ap.parse_args()
    kinds, patches, rows = load(args.run_dir)
    if not rows:
        sys.exit("no finished arm in " + args.run_dir)
    head = ["arm", "process"]
    for p in patches:
        head += ["%d³ tracked MiB" % p, "%d³ RSS MiB" % p]
    for p in patches:
        head += ["%d³ s/step" % p]
    print("| " + " | ".join(head) + " |")
    print("| --- | --- |" + " ---: |" * (len(head) - 2))
    for kind in kinds:
        for (k, role), cells in rows.items():
            if k != kind:
                continue
            line = [kind, role]
            for p in patches:
                c = cells.get(p)
                line += ["%.1f" % c["tracked"], "%.0f" % c["rss"]] if c else ["—", "—"]
            for p in patches:
                c = cells.get(p)
                line += ["%.2f" % c["step_s"] if c else "—"]
            print("| " + " | ".join(line) + " |")


if __name__ == "__main__":
    main()

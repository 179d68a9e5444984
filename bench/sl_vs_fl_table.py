#!/usr/bin/python3
"""Split learning against federated averaging (Singh et al. 2019), from a finished run of
experiments/sl-vs-fl.json (or any run with split and federated arms): the bytes each
client sends and receives per epoch of its data, per model and number of clients K, and
the K from which split costs a client less than federated. Standard library only.

    build/quartet run experiments/sl-vs-fl.json --out results/sl-vs-fl --progress none
    python3 bench/sl_vs_fl_table.py results/sl-vs-fl

Bytes are the server's counts on each client's connection, headers included:
- split: one turn is one client's pass over its partition; its bytes are the turn's
  `traffic` summed over kinds (activations, gradients, labels, the client half handed
  over both ways, control);
- federated: a round's `clients[].bytes_down + bytes_up`, divided by local_epochs.

The crossing is given three ways: interpolated in log K between the measured Ks where
the sign of split - federated changes; from the measured costs, split(K) = A/K + c
against federated F (A: cut bytes per sample times the training samples p; c: the
hand-over and control per turn), K* = A / (F - c); and analytic, K* = p(2q + 4) /
(2(W - w_c)) with q the cut's bytes per sample, W the model's and w_c the client half's
bytes (docs/split.md).
"""

import argparse
import json
import math
import os
import sys
from collections import defaultdict

CUT_KINDS = ("activations", "gradients", "labels")


def read_jsonl(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a torn last line
    return out


def steps_of(run_dir, arm):
    path = os.path.join(run_dir, arm, "roles", "server.jsonl")
    if not os.path.exists(path):
        return []
    return [r for r in read_jsonl(path) if r.get("type") == "step"]


def split_figures(steps, batch):
    """Per client-epoch bytes and the parts the crossing needs, from a split arm's turns."""
    turns = [t for r in steps for t in r.get("split", {}).get("turns", []) if t.get("ok")]
    if not turns:
        return None
    total = cut = fixed = samples = 0
    q = w_c = None
    for t in turns:
        by_kind = {k: c["sent"] + c["received"] for k, c in t["traffic"].items()}
        total += sum(by_kind.values())
        cut += sum(by_kind.get(k, 0) for k in CUT_KINDS)
        fixed += sum(v for k, v in by_kind.items() if k not in CUT_KINDS)
        n = t["steps"] * batch
        samples += n
        q = t["cut"]["floats_per_sample"] * 4
        labels = 4 if "labels" in by_kind else 0
        w_c = (t["analytic_bytes"] - n * (2 * q + labels)) // 2
    return {
        "per_client_epoch": total / len(turns),
        "cut_per_sample": cut / samples,
        "fixed_per_turn": fixed / len(turns),
        "samples_per_turn": samples / len(turns),
        "q": q,
        "w_c": w_c,
        "labels": "labels" in turns[0]["traffic"],
    }


def federated_figures(steps, local_epochs):
    clients = [c for r in steps for c in r.get("round", {}).get("clients", [])]
    if not clients:
        return None
    total = sum(c["bytes_down"] + c["bytes_up"] for c in clients)
    return {
        "per_client_epoch": total / (len(clients) * local_epochs),
        "model_bytes": steps[-1]["round"]["model_bytes"],
    }


def size(b):
    """Bytes in decimal units, three significant figures."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            v = b / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{b:.0f} B"


def crossing_interpolated(points):
    """K where split falls below federated, interpolating log(split/fed) in log K."""
    points = sorted(points)
    for (k0, s0, f0), (k1, s1, f1) in zip(points, points[1:]):
        d0, d1 = math.log(s0 / f0), math.log(s1 / f1)
        if d0 >= 0 > d1:
            x = math.log(k0) + (math.log(k1) - math.log(k0)) * d0 / (d0 - d1)
            return f"{math.exp(x):.1f}"
    if points and all(s < f for _, s, f in points):
        return f"below {points[0][0]}"
    if points:
        return f"beyond {points[-1][0]}"
    return "—"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a run folder of quartet run")
    ap.add_argument("--p", type=int, default=0,
                    help="training samples for the analytic crossing; default: those the run used")
    args = ap.parse_args()

    with open(os.path.join(args.run_dir, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)["spec"]
    default_model = spec["workload"]["model"]
    # model -> K -> {"split": figures, "federated": figures}
    table = defaultdict(lambda: defaultdict(dict))
    wall = 0.0
    for arm in spec["arms"]:
        regime = arm["regime"]
        if regime not in ("split", "federated"):
            continue
        if regime == "split" and arm.get("variant", "vanilla") != "vanilla":
            continue
        summary_path = os.path.join(args.run_dir, arm["name"], "summary.json")
        if os.path.exists(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                wall += json.load(f).get("wall_seconds", 0.0)
        steps = steps_of(args.run_dir, arm["name"])
        if regime == "split":
            figures = split_figures(steps, arm["train"]["batch"])
        else:
            figures = federated_figures(steps, arm["local_epochs"])
        if figures:
            table[arm.get("model", default_model)][arm["clients"]][regime] = figures
    if not table:
        sys.exit(f"{args.run_dir}: no finished split or federated arm")

    models = list(table)
    ks = sorted({k for m in models for k in table[m]})
    print("Bytes per client per epoch (sent + received, headers included); **bold**: split costs less.\n")
    header = ["clients K"] + [f"{m}: {r}" for m in models for r in ("split", "federated")]
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join(["---:"] * len(header)) + " |")
    for k in ks:
        row = [str(k)]
        for m in models:
            s = table[m][k].get("split")
            f = table[m][k].get("federated")
            cell = size(s["per_client_epoch"]) if s else "—"
            if s and f and s["per_client_epoch"] < f["per_client_epoch"]:
                cell = f"**{cell}**"
            row += [cell, size(f["per_client_epoch"]) if f else "—"]
        print("| " + " | ".join(row) + " |")

    print("\nWhere split costs a client less than federated (K*):\n")
    print("| model | weights W | client half w_c | cut q per sample | samples p | K* interpolated "
          "| K* = A / (F − c) | K* analytic{} |".format(f", p = {args.p:,}" if args.p else ""))
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in models:
        splits = [(k, v["split"]) for k, v in sorted(table[m].items()) if "split" in v]
        feds = [v["federated"] for v in table[m].values() if "federated" in v]
        points = [(k, v["split"]["per_client_epoch"], v["federated"]["per_client_epoch"])
                  for k, v in table[m].items() if "split" in v and "federated" in v]
        if not splits or not feds:
            continue
        s_any = splits[-1][1]
        p_run = round(sum(k * s["samples_per_turn"] for k, s in splits) / len(splits))
        p = args.p or p_run
        a = p_run * sum(s["cut_per_sample"] for _, s in splits) / len(splits)
        c = sum(s["fixed_per_turn"] for _, s in splits) / len(splits)
        f_mean = sum(f["per_client_epoch"] for f in feds) / len(feds)
        fitted = f"{a / (f_mean - c):.1f}" if f_mean > c else "never"
        w = feds[0]["model_bytes"]
        q, w_c = s_any["q"], s_any["w_c"]
        labels = 4 if s_any["labels"] else 0
        analytic = f"{p * (2 * q + labels) / (2 * (w - w_c)):.1f}"
        print(f"| {m} | {size(w)} | {size(w_c)} | {q:,} B | {p_run:,} | {crossing_interpolated(points)} "
              f"| {fitted} | {analytic} |")
    if wall:
        print(f"\nArms' wall time, summed: {wall / 60:.1f} min.")


if __name__ == "__main__":
    main()

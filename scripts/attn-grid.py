#!/usr/bin/env python3
"""The decode-attention benchmark grid of the README ("Attention on codes"): `tq attn-bench` for two shapes
(head_dim 128 with 32 query heads on 8 KV heads; head_dim 256 with 4 on 1, Gemma 3's global
layers) at several contexts, one layer and --layers 32, every scheme in one run per cell (so
each ratio is against the f16 measured in the same run). Each cell runs --runs times and keeps
each scheme's best time: on a shared machine the slowest runs measure the neighbours.

    scripts/attn-grid.py [--tq build/tq] [--ctx 4096,16384,32768] [--layers 1,32]
                         [--threads 2] [--runs 2] [--schemes f16,q8_0,q4_0,turbo3,turbo4]
                         [--prefill]    (also 64-query prefill over the history, 1 layer)

Prints one markdown table per shape; --json writes every cell's figures to a file.
"""
import argparse
import json
import subprocess
import sys

SHAPES = [("d128 32q/8kv", ["--head-dim", "128", "--q-heads", "32", "--kv-heads", "8"]),
          ("d256 4q/1kv", ["--head-dim", "256", "--q-heads", "4", "--kv-heads", "1"])]


def run_cell(tq, shape, ctx, layers, threads, schemes, queries, runs):
    best = {}
    flops_us = 0.0  # f16 GFLOP/s × its µs: the step's work, the same in every run
    for _ in range(runs):
        cmd = [tq, "attn-bench"] + shape + ["--ctx", str(ctx), "--layers", str(layers),
                                            "--threads", str(threads), "--scheme", schemes,
                                            "--queries", str(queries), "--json"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        d = json.loads(out)
        f16_run = next(r for r in d["results"] if r["scheme"] == "f16")
        flops_us = d["f16_gflops"] * f16_run["us_per_step"]
        for r in d["results"]:
            s = r["scheme"]
            if s not in best or r["us_per_step"] < best[s]["us_per_step"]:
                best[s] = dict(r)
    f16 = best["f16"]["us_per_step"]
    for r in best.values():
        r["speedup_vs_f16"] = f16 / r["us_per_step"]
    gflops = flops_us / f16  # the f16 GFLOP/s of its best run
    return {"ctx": ctx, "layers": layers, "queries": queries, "f16_gflops": gflops,
            "results": [best[s] for s in best]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tq", default="build/tq")
    ap.add_argument("--ctx", default="4096,16384,32768")
    ap.add_argument("--layers", default="1,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--schemes", default="f16,q8_0,q4_0,turbo3,turbo4")
    ap.add_argument("--prefill", action="store_true")
    ap.add_argument("--json", help="write all cells to this file")
    a = ap.parse_args()
    cells = []
    for name, shape in SHAPES:
        rows = []
        plan = [(int(c), int(l), 1) for c in a.ctx.split(",") for l in a.layers.split(",")]
        if a.prefill:
            plan.append((4096, 1, 64))
        for ctx, layers, q in plan:
            cell = run_cell(a.tq, shape, ctx, layers, a.threads, a.schemes, q, a.runs)
            cell["shape"] = name
            cells.append(cell)
            rows.append(cell)
            print(f"{name} ctx {ctx} layers {layers} queries {q}: done", file=sys.stderr)
        schemes = [r["scheme"] for r in rows[0]["results"]]
        print(f"\n{name}, {a.threads} threads, best of {a.runs} runs; time per step (all layers), "
              "speed-up against f16 of the same run\n")
        print("| ctx | layers | queries | f16 GFLOP/s | " +
              " | ".join(f"{s} µs (×)" for s in schemes) + " |")
        print("|" + "---|" * (4 + len(schemes)))
        for c in rows:
            by = {r["scheme"]: r for r in c["results"]}
            cols = [f"{by[s]['us_per_step']:.0f} ({by[s]['speedup_vs_f16']:.2f}×)" for s in schemes]
            print(f"| {c['ctx']} | {c['layers']} | {c['queries']} | {c['f16_gflops']:.1f} | " +
                  " | ".join(cols) + " |")
        by = {r["scheme"]: r for r in rows[0]["results"]}
        print("\nbytes/token/layer: " + ", ".join(f"{s} {by[s]['bytes_per_token']:.0f} "
                                                 f"({by[s]['ratio_vs_fp16']:.2f}× vs fp16)"
                                                 for s in schemes))
        print("output rel. L2 vs exact fp32 (random data): " +
              ", ".join(f"{s} {by[s]['rel_l2']:.3g}" for s in schemes))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(cells, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The README's side-by-side tables from one scripts/peers-bench.sh run.

Usage: scripts/peers-table.py OUT_DIR

Reads OUT_DIR/tq_<model>_<kv>.json (tq bench --json), llama_<model>_<kv>.jsonl (llama.cpp's
llama-bench -o jsonl) and ik_<model>_<kv>_{pp,d<depth>}.json (ik_llama.cpp's llama-bench -o json)
and prints, per model, a markdown table: tokens/s of pp512 and tg64 at each depth for each engine,
the prefill ratios against both peers and decode against ik_llama.cpp's f16 cache (the issue's
targets). A missing file or row prints as "—"; nothing is invented.
"""
import json
import os
import sys

MODELS = [("gemma3", "Gemma 3 270M Q4_K_M", [0, 4096, 16384]),
          ("smollm2", "SmolLM2-135M-Instruct Q4_1", [0, 4096])]
KVS = ["f16", "q8_0", "q4_0", "turbo3", "turbo4"]


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read().strip()
    if not text:
        return []
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def ours(out, m, kv):
    pp, tg = {}, {}
    for r in load(os.path.join(out, f"tq_{m}_{kv}.json")):
        pp[r["depth"]] = r["pp_tok_s"]
        tg[r["depth"]] = r["tg_tok_s"]
    return pp, tg


def llama(out, m, kv):
    pp, tg = {}, {}
    for r in load(os.path.join(out, f"llama_{m}_{kv}.jsonl")):
        d = r.get("n_depth", 0)
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            pp[d] = r["avg_ts"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            tg[d] = r["avg_ts"]
    return pp, tg


def ik(out, m, kv, depths):
    pp, tg = {}, {}
    for r in load(os.path.join(out, f"ik_{m}_{kv}_pp.json")):
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            pp[0] = r["avg_ts"]
    for d in depths:
        for r in load(os.path.join(out, f"ik_{m}_{kv}_d{d}.json")):
            if r.get("n_gen", 0) > 0:  # -p 0 -n 64 at depth 0; -gp d,64 at depth d
                tg[d] = r["avg_ts"]
    return pp, tg


def f(v, digits=1):
    return "—" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: scripts/peers-table.py OUT_DIR (a scripts/peers-bench.sh output folder)")
    out = sys.argv[1]
    for m, title, depths in MODELS:
        ik_f16_tg = ik(out, m, "f16", depths)[1]
        print(f"{title}, tokens/s (pp512 @ depth / tg64 @ depth; ik_llama.cpp: pp512 at depth 0 only, "
              f"tg64 as `-gp DEPTH,64`):\n")
        print("| KV | depth | ours pp | llama.cpp pp | ik pp | ours / llama.cpp pp | ours / ik pp "
              "| ours tg | llama.cpp tg | ik tg | ours tg / ik f16 tg |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for kv in KVS:
            opp, otg = ours(out, m, kv)
            lpp, ltg = llama(out, m, kv) if kv in ("f16", "q8_0", "q4_0") else ({}, {})
            ipp, itg = ik(out, m, kv, depths) if kv in ("f16", "q8_0", "q4_0") else ({}, {})
            for d in depths:
                if d not in opp and d not in lpp:
                    continue
                print(f"| {kv} | {d} | {f(opp.get(d))} | {f(lpp.get(d))} | {f(ipp.get(d))} "
                      f"| {ratio(opp.get(d), lpp.get(d))} | {ratio(opp.get(d), ipp.get(d))} "
                      f"| {f(otg.get(d))} | {f(ltg.get(d))} | {f(itg.get(d))} "
                      f"| {ratio(otg.get(d), ik_f16_tg.get(d))} |")
        print()


if __name__ == "__main__":
    main()

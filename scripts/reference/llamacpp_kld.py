#!/usr/bin/env python3
"""llama.cpp's own quality figures for quantized KV caches: PPL, KL divergence against its f16 run
(mean, p99), same top-1, bytes vs f16, computed the way `llama-perplexity --kl-divergence` does,
with llama.cpp (through llama-cpp-python's low-level bindings) as the oracle.

Method (doc/llamacpp-oracle.md):
  - the whole text file is read as bytes, one trailing '\\n' removed, tokenized once with
    add_special=true (one BOS at the start), parse_special=false;
  - cut into consecutive windows of --ctx tokens (the rest dropped); in each window the first token
    is replaced by BOS when the vocab adds BOS; the window is evaluated from position 0 on an
    empty cache as one batch (n_batch = ctx, n_ubatch = 512, llama-perplexity's defaults);
  - the logits at positions ctx/2 .. ctx-2 are scored, each against the next original token;
  - every cache type runs on the same window, f16 first: its log-probs (float64 log-softmax of the
    float32 logits) are the reference for the others' KL divergence, KLD(row) =
    sum_v p_f16(v) (log p_f16(v) - log p_type(v)); same top-1 = argmax equal;
  - PPL = exp(mean NLL) of each type's own logits; KLD p99 = the order statistic at
    floor(0.99 * (rows - 1)) of the sorted row KLDs (the rule of engine/eval.h);
  - type_k = type_v = the type, flash attention on (needed for a quantized V cache), every key and
    value of the window stored quantized (llama.cpp's normal behaviour). "TYPE:norot" runs TYPE with
    LLAMA_ATTN_ROT_DISABLE=1 set while its context is created (llama.cpp reads it there), turning
    off the Hadamard rotation llama.cpp applies to quantized caches by default.
Only one window's arrays are kept (Gemma 3's vocab is 262144: 1023 rows of logits = 1 GiB).

Usage: llamacpp_kld.py --model M --text T [--ctx 2048] [--chunks 20]
                       [--types f16,q8_0,q4_0,q4_0:norot] [--threads 2] [--json OUT]
                       [--extra-bufts]
The JSON is rewritten after every window ("complete": false until the last one).
"""

import argparse
import ctypes
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

import llama_cpp as lc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import read_perplexity_text, sha256_file  # noqa: E402

# ggml type ids and bits per element (ggml block sizes: bytes per block * 8 / 32 elements)
KV_TYPES = {
    "f16": (lc.GGML_TYPE_F16, 16.0),
    "q8_0": (lc.GGML_TYPE_Q8_0, 8.5),   # 34 B / 32
    "q5_1": (lc.GGML_TYPE_Q5_1, 6.0),   # 24 B / 32
    "q5_0": (lc.GGML_TYPE_Q5_0, 5.5),   # 22 B / 32
    "q4_1": (lc.GGML_TYPE_Q4_1, 5.0),   # 20 B / 32
    "q4_0": (lc.GGML_TYPE_Q4_0, 4.5),   # 18 B / 32
    "iq4_nl": (lc.GGML_TYPE_IQ4_NL, 4.5),  # 18 B / 32
}
ROW_BLOCK = 64   # rows per float64 block in the log-softmax (64 x 262144 x 8 B = 128 MiB)
P99 = 0.99

_log_lines = []


@lc.llama_log_callback
def _log_cb(level, text, user_data):
    if level >= 3 or b"attn_rot_" in text or b"ROT_DISABLE" in text:  # 3, 4: warnings, errors
        _log_lines.append(text.decode("utf-8", "replace").strip())


def parse_type(name):
    base, _, flag = name.partition(":")
    if base not in KV_TYPES or flag not in ("", "norot"):
        raise SystemExit(f"unknown cache type '{name}' (known: {', '.join(KV_TYPES)}, suffix :norot)")
    return base, flag == "norot"


def tokenize(vocab, data):
    cap = len(data) + 16
    while True:
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(vocab, data, len(data), buf, cap, True, False)
        if n >= 0:
            return np.array(buf[:n], dtype=np.int32)
        cap = -n


class Model:
    def __init__(self, path, threads, extra_bufts):
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        mp.use_extra_bufts = extra_bufts  # off by default: repacked/AMX layouts crash on AMX CPUs
        self.model = lc.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit(f"cannot load {path}")
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.bos = lc.llama_vocab_bos(self.vocab)
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.threads = threads

    def context_params(self, n_ctx, ggml_type):
        cp = lc.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_ubatch = min(512, n_ctx)   # llama-perplexity's default -ub
        cp.n_seq_max = 1
        cp.n_threads = self.threads
        cp.n_threads_batch = self.threads
        cp.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cp.type_k = ggml_type
        cp.type_v = ggml_type
        cp.swa_full = False             # common_params' default, as llama-perplexity runs
        cp.no_perf = True
        return cp

    def eval_window(self, tokens, first, ggml_type, norot):
        """Evaluate one window in a fresh context; return float32 logits of rows first..n-2
        (a copy), or None if llama.cpp refuses the context."""
        n = len(tokens)
        cp = self.context_params(n, ggml_type)
        old = os.environ.get("LLAMA_ATTN_ROT_DISABLE")
        if norot:
            os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"
        elif old is not None:
            del os.environ["LLAMA_ATTN_ROT_DISABLE"]
        try:
            ctx = lc.llama_init_from_model(self.model, cp)
        finally:
            if old is None:
                os.environ.pop("LLAMA_ATTN_ROT_DISABLE", None)
            else:
                os.environ["LLAMA_ATTN_ROT_DISABLE"] = old
        if not ctx:
            return None
        batch = lc.llama_batch_init(n, 0, 1)
        try:
            for i in range(n):
                batch.token[i] = int(tokens[i])
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if first <= i <= n - 2 else 0
            batch.n_tokens = n
            rc = lc.llama_decode(ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            n_out = n - 1 - first
            ptr = lc.llama_get_logits(ctx)
            rows = np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab)).copy()
        finally:
            lc.llama_batch_free(batch)
            lc.llama_free(ctx)
        return rows


def log_softmax64(block):
    x = block.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    x -= m
    lse = np.log(np.exp(x).sum(axis=1, keepdims=True))
    x -= lse
    return x


class Acc:
    def __init__(self):
        self.nll = 0.0
        self.n = 0
        self.kld = []
        self.same = 0
        self.windows = []


class Base:
    """The f16 run's window: per row block, p = softmax in float64 and H = sum p log p."""

    def __init__(self, rows):
        self.p, self.h, self.top = [], [], rows.argmax(axis=1)
        for s in range(0, len(rows), ROW_BLOCK):
            lp = log_softmax64(rows[s:s + ROW_BLOCK])
            p = np.exp(lp)
            self.h.append((p * lp).sum(axis=1))
            self.p.append(p)


def score_window(rows, targets, base, acc):
    """NLL of rows; KLD(row) = sum p_f16 (log p_f16 - log p_row) and top-1 against base (None
    for the f16 run itself)."""
    nll_sum = 0.0
    kld_w = []
    for b, s in enumerate(range(0, len(rows), ROW_BLOCK)):
        e = min(s + ROW_BLOCK, len(rows))
        lq = log_softmax64(rows[s:e])
        nll_sum += float(-lq[np.arange(e - s), targets[s:e]].sum())
        if base is not None:
            kld_w.append(base.h[b] - (base.p[b] * lq).sum(axis=1))
    acc.nll += nll_sum
    acc.n += len(rows)
    w = {"nll_sum": nll_sum, "n_scored": len(rows)}
    if base is not None:
        kw = np.concatenate(kld_w)
        same = int((rows.argmax(axis=1) == base.top).sum())
        acc.kld.append(kw)
        acc.same += same
        w.update(kld_sum=float(kw.sum()), same_top1=same)
    acc.windows.append(w)


def summary(name, acc, bits, base_ppl):
    ppl = float(np.exp(acc.nll / acc.n))
    r = {"type": name, "bits_per_element": bits, "bytes_vs_f16": 16.0 / bits,
         "ppl": ppl, "n_scored": acc.n, "nll_total": acc.nll}
    if base_ppl is not None:
        r["dppl_percent"] = 100.0 * (ppl / base_ppl - 1.0)
    if acc.kld:
        k = np.sort(np.concatenate(acc.kld))
        r.update(kld_mean=float(k.mean()), kld_median=float(k[int(0.5 * (len(k) - 1))]),
                 kld_p99=float(k[int(P99 * (len(k) - 1))]), kld_max=float(k[-1]),
                 same_top1_percent=100.0 * acc.same / acc.n)
    r["windows"] = acc.windows
    return r


def lscpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fp:
        json.dump(obj, fp, indent=1)
        fp.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--types", default="f16,q8_0,q4_0,q4_0:norot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--extra-bufts", action="store_true",
                    help="keep llama.cpp's extra CPU buffer types (repack, AMX); off by default "
                         "since they crash llama_decode on AMX CPUs")
    args = ap.parse_args()
    names = args.types.split(",")
    if names[0] != "f16":
        names = ["f16"] + [n for n in names if n != "f16"]
    parsed = [parse_type(n) for n in names]
    lc.llama_log_set(_log_cb, ctypes.c_void_p())

    t0 = time.time()
    model_path = os.path.realpath(args.model)
    M = Model(model_path, args.threads, args.extra_bufts)
    tokens = tokenize(M.vocab, read_perplexity_text(args.text)[0])
    n_avail = len(tokens) // args.ctx
    n_chunks = min(args.chunks, n_avail)
    first = args.ctx // 2
    print(f"{os.path.basename(args.model)}: {len(tokens)} tokens, {n_avail} windows of {args.ctx}, "
          f"doing {n_chunks}; vocab {M.n_vocab}, add_bos {M.add_bos}", file=sys.stderr, flush=True)

    accs = {n: Acc() for n in names}
    refused = {}
    secs = {n: 0.0 for n in names}
    rot_log = {}
    # Paths in the recorded command relative to the repository, so that it names no machine.
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def rel(arg):
        if os.path.isabs(arg) or os.path.exists(arg):
            return os.path.relpath(os.path.abspath(arg), repo)
        return arg

    cmd = " ".join(rel(a) for a in sys.argv)
    meta = {
        "description": (
            "llama.cpp's own KV-cache quality figures, computed as llama-perplexity --kl-divergence "
            "does against its f16 run (method: doc/llamacpp-oracle.md and the script's docstring). "
            f"Command: {cmd}. Oracle: llama.cpp of llama-cpp-python {lc.__version__} (CPU build), "
            f"model params use_extra_bufts={args.extra_bufts}. Machine: {lscpu_model()}, "
            f"{os.cpu_count()} CPUs. Date: {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC')}."),
        "generator": "scripts/reference/llamacpp_kld.py",
        "llama_cpp_python_version": lc.__version__,
        "llama_cpp_system_info": lc.llama_print_system_info().decode("utf-8", "replace").strip(),
        "numpy": np.__version__,
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256_file(model_path),
        "text_file": os.path.basename(args.text),
        "text_sha256": sha256_file(args.text),
        "n_tokens_file": int(len(tokens)),
        "n_vocab": int(M.n_vocab),
        "add_bos": M.add_bos,
        "n_ctx": args.ctx, "n_batch": args.ctx, "n_ubatch": min(512, args.ctx),
        "flash_attn": True, "swa_full": False, "threads": args.threads,
        "first_scored_position": first,
        "p99_rule": "sorted row KLDs, element floor(0.99 * (rows - 1))",
    }

    def emit(done_windows, complete):
        base_ppl = float(np.exp(accs["f16"].nll / accs["f16"].n)) if accs["f16"].n else None
        res = dict(meta, complete=complete, n_chunks=done_windows, n_chunks_requested=n_chunks,
                   refused_types=refused, rotation_log=rot_log,
                   seconds_per_type=secs, seconds_total=time.time() - t0,
                   results=[summary(n, accs[n], KV_TYPES[parse_type(n)[0]][1], None if n == "f16" else base_ppl)
                            for n in names if n not in refused and accs[n].n])
        if args.json:
            write_json(args.json, res)
        return res

    for w in range(n_chunks):
        orig = tokens[w * args.ctx:(w + 1) * args.ctx]
        win = orig.copy()
        if M.add_bos:
            win[0] = M.bos
        targets = orig[first + 1:]
        base = None
        for n, (tname, norot) in zip(names, parsed):
            if n in refused:
                continue
            tc = time.time()
            del _log_lines[:]
            rows = M.eval_window(win, first, KV_TYPES[tname][0], norot)
            if rows is None:
                refused[n] = "llama_init_from_model failed: " + " | ".join(_log_lines[-3:])
                print(f"  {n}: refused as a KV type ({refused[n]})", file=sys.stderr, flush=True)
                continue
            if w == 0:
                rot_log[n] = [s for s in _log_lines if "attn_rot_" in s or "ROT_DISABLE" in s]
            score_window(rows, targets, base, accs[n])
            if n == "f16":
                base = Base(rows)
            del rows
            secs[n] += time.time() - tc
            a = accs[n]
            extra = ""
            if a.kld:
                extra = f" kld {np.concatenate(a.kld).mean():.5f} top1 {100.0 * a.same / a.n:.2f}%"
            print(f"[{w + 1}/{n_chunks}] {n:12s} ppl {np.exp(a.nll / a.n):.4f}{extra} "
                  f"({time.time() - tc:.1f}s)", file=sys.stderr, flush=True)
        del base
        emit(w + 1, w + 1 == n_chunks)

    res = emit(n_chunks, True)
    print(f"\n{'scheme':14s} {'PPL':>8s} {'dPPL%':>7s} {'KLD':>8s} {'p99':>7s} {'top1':>6s} {'vs f16':>6s}")
    for r in res["results"]:
        if "kld_mean" in r:
            print(f"{r['type']:14s} {r['ppl']:8.3f} {r['dppl_percent']:+7.2f} {r['kld_mean']:8.4f} "
                  f"{r['kld_p99']:7.3f} {r['same_top1_percent']:5.1f}% {r['bytes_vs_f16']:5.2f}x")
        else:
            print(f"{r['type']:14s} {r['ppl']:8.3f} {'':7s} {'':8s} {'':7s} {'':6s} {r['bytes_vs_f16']:5.2f}x")
    for n, why in refused.items():
        print(f"{n}: refused ({why})")
    print(f"total {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()

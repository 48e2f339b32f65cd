#!/usr/bin/env python3
"""Independent float32 numpy forward pass of Gemma 3 from the GGUF, written from doc/gemma3.md.

It dequantizes every weight with the `gguf` package and runs the model in plain float32/float64
(no activation quantization, no f16 KV cache, exact tanh-GELU), so it checks the architecture
description rather than llama.cpp's rounding. With --emulate-ggml it also applies the roundings
of ggml's CPU backend listed in doc/gemma3.md, which shows how much of the gap they explain. It compares itself against the golden logits:

  .venv-ref/bin/python scripts/reference/numpy_forward.py [--emulate-ggml] [--model M] [--golden G]

(--check-dump NPZ: compare step by step with llama.cpp's intermediates from dump_tensors.py;
--ppl-chunks N: perplexity of the first N chunks against gemma3_ppl.json)
and prints, per prompt, the largest |logit difference| over the recorded top-20 and fixed ids,
the logsumexp difference, and whether the argmax agrees. Not used by any test.
"""

import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class Gemma3:
    def __init__(self, path):
        r = GGUFReader(path)
        self.kv = {}
        for k, f in r.fields.items():
            if f.types and f.types[0].name not in ("ARRAY", "STRING") and f.data:
                self.kv[k] = f.parts[f.data[0]].tolist()[0]
        self.t = {}
        self.qtype = {}
        self.emulate = False
        self.rec = None  # dict: set to record per-layer outputs under llama.cpp's names
        for t in r.tensors:
            self.qtype[t.name] = t.tensor_type.name
            a = dequantize(t.data, t.tensor_type).astype(np.float32)
            # GGUF shape is (ne0, ne1): ne0 is the row length; numpy gets (ne1, ne0)
            self.t[t.name] = a.reshape([int(x) for x in reversed(t.shape.tolist())]) if a.ndim > 1 else a.reshape(-1)
        g = lambda k: self.kv["gemma3." + k]
        self.n_embd = g("embedding_length")
        self.n_layer = g("block_count")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv")
        self.head_dim = g("attention.key_length")
        self.eps = g("attention.layer_norm_rms_epsilon")
        self.base_global = g("rope.freq_base")
        self.base_local = 10000.0  # no gemma3.rope.freq_base_swa key: llama.cpp's default
        self.window = g("attention.sliding_window")
        self.is_swa = [(il % 6) < 5 for il in range(self.n_layer)]

    # ---- optional emulation of ggml's CPU roundings (see doc/gemma3.md, "Numerics") -------------
    @staticmethod
    def q8_0(x):
        """Round-trip x (..., n) through ggml's Q8_0 activation quantization (blocks of 32)."""
        sh = x.shape
        b = x.reshape(-1, 32).astype(np.float32)
        amax = np.abs(b).max(-1, keepdims=True).astype(np.float32)
        d = (amax / np.float32(127)).astype(np.float32)
        # the x86 (AVX) quantizer: scale by 127/amax, round half to even, d stored as f16
        idv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
        q = np.rint(b * idv)
        return (q * d.astype(np.float16).astype(np.float32)).reshape(sh)

    @staticmethod
    def q8_k(x):
        """Round-trip x (..., n) through ggml's Q8_K activation quantization (blocks of 256)."""
        sh = x.shape
        b = x.reshape(-1, 256).astype(np.float32)
        idx = np.abs(b).argmax(-1)
        mx = b[np.arange(len(b)), idx][:, None]
        safe = np.where(mx != 0, mx, 1).astype(np.float32)
        iscale = (np.float32(-127) / safe).astype(np.float32)
        q = np.minimum(np.rint(iscale * b), 127)  # nearest_int: round half to even
        d = (np.float32(1) / iscale).astype(np.float32)
        return np.where(mx != 0, q * d, 0).astype(np.float32).reshape(sh)

    @staticmethod
    def f16(x):
        return x.astype(np.float16).astype(np.float32)

    def mm(self, x, name):
        """x @ W.T, with the activation rounded the way ggml's CPU matmul sees it if emulating."""
        if self.emulate:
            x = self.q8_k(x) if self.qtype[name] in ("Q4_K", "Q6_K") else self.q8_0(x)
        return x @ self.t[name].T

    def rms(self, x, w):
        x64 = x.astype(np.float64)
        return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.eps)).astype(np.float32) * w

    def rope(self, x, pos, base):
        # x: (T, H, D); NeoX layout: pairs (i, i + D/2)
        d = x.shape[-1]
        inv = base ** (-np.arange(0, d // 2, dtype=np.float64) * 2.0 / d)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c = np.cos(ang)[:, None, :].astype(np.float32)
        s = np.sin(ang)[:, None, :].astype(np.float32)
        x0, x1 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def gelu(self, x):
        if not self.emulate:
            return self.gelu_tanh(x)
        y = self.f16(self.gelu_tanh(self.f16(x)))
        return np.where(x <= -10, 0, np.where(x >= 10, x, y)).astype(np.float32)

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)))

    def attention(self, q, k, v, pos, swa):
        """q: (T, n_head, D) already scaled; k, v: (T, n_head_kv, D). Causal, plus the window on
        sliding-window layers."""
        if self.emulate:  # f16 KV cache; Q rounded to f16 for K.q
            q, k, v = self.f16(q), self.f16(k), self.f16(v)
        T = q.shape[0]
        mask = pos[None, :] > pos[:, None]
        if swa:
            mask |= (pos[:, None] - pos[None, :]) >= self.window
        out = np.empty((T, self.n_head, self.head_dim), np.float32)
        g = self.n_head // self.n_head_kv
        for hh in range(self.n_head):
            s = q[:, hh, :] @ k[:, hh // g, :].T
            s = np.where(mask, -np.inf, s).astype(np.float64)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            s = s.astype(np.float32)
            if self.emulate:  # probabilities rounded to f16 for the product with f16 V
                s = self.f16(s)
            out[:, hh, :] = s @ v[:, hh // g, :]
        return out

    def forward(self, ids):
        T = len(ids)
        t = self.t
        pos = np.arange(T)
        x = t["token_embd.weight"][ids] * np.float32(np.sqrt(self.n_embd))
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.rms(x, t[p + "attn_norm.weight"])
            q = self.mm(h, p + "attn_q.weight").reshape(T, self.n_head, self.head_dim)
            k = self.mm(h, p + "attn_k.weight").reshape(T, self.n_head_kv, self.head_dim)
            v = self.mm(h, p + "attn_v.weight").reshape(T, self.n_head_kv, self.head_dim)
            q = self.rms(q, t[p + "attn_q_norm.weight"])
            k = self.rms(k, t[p + "attn_k_norm.weight"])
            base = self.base_local if self.is_swa[il] else self.base_global
            q = self.rope(q, pos, base) * np.float32(1.0 / np.sqrt(self.head_dim))
            k = self.rope(k, pos, base)
            out = self.attention(q, k, v, pos, self.is_swa[il])
            a = self.mm(out.reshape(T, -1), p + "attn_output.weight")
            x = x + self.rms(a, t[p + "post_attention_norm.weight"])
            h = self.rms(x, t[p + "ffn_norm.weight"])
            f = self.gelu(self.mm(h, p + "ffn_gate.weight")) * self.mm(h, p + "ffn_up.weight")
            f = self.mm(f, p + "ffn_down.weight")
            x = x + self.rms(f, t[p + "post_ffw_norm.weight"])
            if self.rec is not None:
                self.rec[f"l_out-{il}"] = x.copy()
        x = self.rms(x, t["output_norm.weight"])
        return self.mm(x, "token_embd.weight")  # tied output embedding, no soft-capping


def check_dump(m, path):
    """Per-step check against llama.cpp's intermediates (from dump_tensors.py): every step is fed
    llama.cpp's own input, so the errors do not compound; prints relative L2 errors."""
    D = dict(np.load(path))
    ids = [int(x) for x in D["ids"]]
    T = len(ids)
    pos = np.arange(T)
    t = m.t
    worst = {}

    def rel(name, mine):
        ref = D[name].reshape(mine.shape)
        e = float(np.linalg.norm(mine - ref) / max(np.linalg.norm(ref), 1e-30))
        key = name.split("-")[0]
        worst[key] = max(worst.get(key, 0.0), e)

    rel("inp_scaled", t["token_embd.weight"][ids] * np.float32(np.sqrt(m.n_embd)))
    for il in range(m.n_layer - 1):  # the last layer holds only the last row
        p = f"blk.{il}."
        x = D["inp_scaled" if il == 0 else f"l_out-{il - 1}"].reshape(T, -1)
        rel(f"attn_norm-{il}", m.rms(x, t[p + "attn_norm.weight"]))
        h = D[f"attn_norm-{il}"].reshape(T, -1)
        rel(f"Vcur-{il}", m.mm(h, p + "attn_v.weight"))
        q = m.mm(h, p + "attn_q.weight").reshape(T, m.n_head, m.head_dim)
        k = m.mm(h, p + "attn_k.weight").reshape(T, m.n_head_kv, m.head_dim)
        rel(f"Qcur_normed-{il}", m.rms(q, t[p + "attn_q_norm.weight"]))
        rel(f"Kcur_normed-{il}", m.rms(k, t[p + "attn_k_norm.weight"]))
        base = m.base_local if m.is_swa[il] else m.base_global
        rel(f"Qcur-{il}", m.rope(D[f"Qcur_normed-{il}"].reshape(T, m.n_head, m.head_dim), pos, base))
        rel(f"Kcur-{il}", m.rope(D[f"Kcur_normed-{il}"].reshape(T, m.n_head_kv, m.head_dim), pos, base))
        q = D[f"Qcur-{il}"].reshape(T, m.n_head, m.head_dim) * np.float32(1.0 / np.sqrt(m.head_dim))
        k = D[f"Kcur-{il}"].reshape(T, m.n_head_kv, m.head_dim)
        v = D[f"Vcur-{il}"].reshape(T, m.n_head_kv, m.head_dim)
        rel(f"kqv_out-{il}", m.attention(q, k, v, pos, m.is_swa[il]).reshape(T, -1))
        a = m.mm(D[f"kqv_out-{il}"].reshape(T, -1), p + "attn_output.weight")
        rel(f"attn_post_norm-{il}", m.rms(a, t[p + "post_attention_norm.weight"]))
        rel(f"sa_out-{il}", x + D[f"attn_post_norm-{il}"].reshape(T, -1))
        sa = D[f"sa_out-{il}"].reshape(T, -1)
        rel(f"ffn_norm-{il}", m.rms(sa, t[p + "ffn_norm.weight"]))
        hh = D[f"ffn_norm-{il}"].reshape(T, -1)
        f = m.gelu(m.mm(hh, p + "ffn_gate.weight")) * m.mm(hh, p + "ffn_up.weight")
        rel(f"ffn_out-{il}", m.mm(f, p + "ffn_down.weight"))
        fo = D[f"ffn_out-{il}"].reshape(T, -1)
        rel(f"ffn_post_norm-{il}", m.rms(fo, t[p + "post_ffw_norm.weight"]))
        rel(f"l_out-{il}", sa + D[f"ffn_post_norm-{il}"].reshape(T, -1))
    last = D[f"l_out-{m.n_layer - 1}"].reshape(1, -1)
    rel("result_norm", m.rms(last, t["output_norm.weight"]))
    rel("result_output", m.mm(D["result_norm"].reshape(1, -1), "token_embd.weight"))
    for k, e in worst.items():
        print(f"{k:16s} worst relative L2 error over layers {e:.2e}", file=sys.stderr)


def ppl_check(m, args):
    import llama_cpp
    gold = json.load(open(os.path.join(os.path.dirname(args.golden), "gemma3_ppl.json")))
    data = open(args.text, "rb").read()
    if data.endswith(b"\n"):
        data = data[:-1]
    mp = llama_cpp.llama_model_default_params()
    mp.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(args.model.encode(), mp)
    vocab = llama_cpp.llama_model_get_vocab(model)
    n = -llama_cpp.llama_tokenize(vocab, data, len(data), None, 0, True, False)
    buf = (llama_cpp.llama_token * n)()
    assert llama_cpp.llama_tokenize(vocab, data, len(data), buf, n, True, False) == n
    tokens = list(buf)
    assert len(tokens) == gold["n_tokens_file"]
    n_ctx = gold["n_ctx"]
    first = n_ctx // 2
    tot, tot_ref, cnt = 0.0, 0.0, 0
    for i in range(args.ppl_chunks):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx]
        ids = [2] + chunk[1:]
        lg = m.forward(ids)[first:n_ctx - 1].astype(np.float64)
        tg = np.asarray(chunk[first + 1:])
        mx = lg.max(1)
        nll = mx + np.log(np.exp(lg - mx[:, None]).sum(1)) - lg[np.arange(len(tg)), tg]
        ref = gold["chunks"][i]["nll_sum"]
        tot += nll.sum(); tot_ref += ref; cnt += len(tg)
        print(f"chunk {i}: nll_sum {nll.sum():.3f} ref {ref:.3f}  ppl {np.exp(tot / cnt):.4f} "
              f"ref {np.exp(tot_ref / cnt):.4f}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma3-270m-q4_k_m.gguf"))
    ap.add_argument("--golden", default=os.path.join(ROOT, "tests", "golden", "gemma3_logits.json"))
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--emulate-ggml", action="store_true",
                    help="round activations (Q8_0/Q8_K), the KV cache (f16), attention probabilities "
                         "and GELU (f16) as ggml's CPU backend does")
    ap.add_argument("--ppl-chunks", type=int, default=0,
                    help="also compute llama-perplexity-style NLL for the first N chunks of --text at "
                         "ctx 512 and compare with gemma3_ppl.json (tokenizes with llama-cpp-python)")
    ap.add_argument("--text", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data", "wikitext-2-raw-test.txt"))
    ap.add_argument("--check-dump", metavar="NPZ", help="per-step check against dump_tensors.py output")
    args = ap.parse_args()
    m = Gemma3(args.model)
    m.emulate = args.emulate_ggml
    if args.check_dump:
        check_dump(m, args.check_dump)
    if args.ppl_chunks:
        ppl_check(m, args)
    gold = json.load(open(args.golden))
    fixed = gold["fixed_token_ids"]
    for pr in gold["prompts"][: args.prompts]:
        ids = pr["ids"] + pr["greedy_ids"][:-1]
        logits = m.forward(ids).astype(np.float64)
        recs = pr["positions"] + pr["greedy_steps"]
        worst = 0.0
        worst_lse = 0.0
        agree = 0
        for p, rec in enumerate(recs):
            row = logits[p]
            d1 = np.abs(row[rec["top_ids"]] - np.array(rec["top_logits"])).max()
            d2 = np.abs(row[fixed] - np.array(rec["fixed_logits"])).max()
            mx = row.max()
            lse = mx + np.log(np.exp(row - mx).sum())
            worst = max(worst, d1, d2)
            worst_lse = max(worst_lse, abs(lse - rec["logsumexp"]))
            agree += int(np.argmax(row) == rec["top_ids"][0])
        print(f"{pr['name']:6s} T={len(ids):3d} max|dlogit|={worst:.4f} max|dlse|={worst_lse:.4f} "
              f"argmax agree {agree}/{len(recs)}", file=sys.stderr)


if __name__ == "__main__":
    main()

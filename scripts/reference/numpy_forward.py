#!/usr/bin/env python3
"""Independent float32 numpy forward pass of Gemma 3 from the GGUF, written from doc/gemma3.md.

It dequantizes every weight with the `gguf` package and runs the model in plain float32/float64
(no activation quantization, no f16 KV cache, exact tanh-GELU), so it checks the architecture
description rather than llama.cpp's rounding. It compares itself against the golden logits:

  .venv-ref/bin/python scripts/reference/numpy_forward.py [--model M] [--golden G] [--prompts N]

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
        for t in r.tensors:
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

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)))

    def forward(self, ids):
        T = len(ids)
        t = self.t
        pos = np.arange(T)
        x = t["token_embd.weight"][ids] * np.float32(np.sqrt(self.n_embd))
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.rms(x, t[p + "attn_norm.weight"])
            q = (h @ t[p + "attn_q.weight"].T).reshape(T, self.n_head, self.head_dim)
            k = (h @ t[p + "attn_k.weight"].T).reshape(T, self.n_head_kv, self.head_dim)
            v = (h @ t[p + "attn_v.weight"].T).reshape(T, self.n_head_kv, self.head_dim)
            q = self.rms(q, t[p + "attn_q_norm.weight"])
            k = self.rms(k, t[p + "attn_k_norm.weight"])
            base = self.base_local if self.is_swa[il] else self.base_global
            q = self.rope(q, pos, base) * np.float32(1.0 / np.sqrt(self.head_dim))
            k = self.rope(k, pos, base)
            mask = pos[None, :] > pos[:, None]
            if self.is_swa[il]:
                mask |= (pos[:, None] - pos[None, :]) >= self.window
            out = np.empty((T, self.n_head, self.head_dim), np.float32)
            g = self.n_head // self.n_head_kv
            for hh in range(self.n_head):
                s = q[:, hh, :] @ k[:, hh // g, :].T
                s = np.where(mask, -np.inf, s).astype(np.float64)
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                out[:, hh, :] = s.astype(np.float32) @ v[:, hh // g, :]
            a = out.reshape(T, -1) @ t[p + "attn_output.weight"].T
            x = x + self.rms(a, t[p + "post_attention_norm.weight"])
            h = self.rms(x, t[p + "ffn_norm.weight"])
            f = self.gelu_tanh(h @ t[p + "ffn_gate.weight"].T) * (h @ t[p + "ffn_up.weight"].T)
            f = f @ t[p + "ffn_down.weight"].T
            x = x + self.rms(f, t[p + "post_ffw_norm.weight"])
        x = self.rms(x, t["output_norm.weight"])
        return x @ t["token_embd.weight"].T  # tied output embedding, no soft-capping


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma3-270m-q4_k_m.gguf"))
    ap.add_argument("--golden", default=os.path.join(ROOT, "tests", "golden", "gemma3_logits.json"))
    ap.add_argument("--prompts", type=int, default=4)
    args = ap.parse_args()
    m = Gemma3(args.model)
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

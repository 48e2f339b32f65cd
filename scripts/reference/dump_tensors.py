#!/usr/bin/env python3
"""Dump llama.cpp's intermediate tensors for one token sequence, for debugging a forward pass.

Runs the GGUF through llama.cpp (llama-cpp-python, CPU, f16 KV cache, no flash attention, one
batch from position 0) with an eval callback that copies every float32 tensor of the graph, and
saves them in an .npz under llama.cpp's names, e.g. inp_scaled, attn_norm-0, Qcur_normed-0,
Qcur-0 (after RoPE, before the 1/16 scale), Kcur-0, Vcur-0, kq_soft_max-0, kqv_out-0,
attn_post_norm-0, sa_out-0, ffn_norm-0, ffn_gate-0, ffn_up-0, ffn_geglu-0, ffn_out-0,
ffn_post_norm-0, l_out-0, ..., result_norm, result_output. Arrays have numpy shape
(ne3, ne2, ne1, ne0) with size-1 axes dropped, e.g. (n_tokens, 640). The last layer and the
output cover only the last token (llama.cpp drops the other rows there).

  .venv-ref/bin/python scripts/reference/dump_tensors.py 2,818,3823,8864 -o /tmp/dump.npz
  .venv-ref/bin/python scripts/reference/numpy_forward.py --check-dump /tmp/dump.npz --emulate-ggml

Not used by any test.
"""

import argparse
import ctypes
import os

import numpy as np

import llama_cpp

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class GgmlTensor(ctypes.Structure):
    # struct ggml_tensor of the vendored ggml (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
    # GGML_MAX_SRC 10, GGML_MAX_NAME 64)
    _fields_ = [
        ("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", help="comma-separated token ids, e.g. 2,818,3823")
    ap.add_argument("-o", "--out", default="/tmp/gemma3_dump.npz")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "gemma3-270m-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    ids = [int(x) for x in args.ids.split(",")]

    dump = {}

    @llama_cpp.ggml_backend_sched_eval_callback
    def cb(tp, ask, _ud):
        if ask:
            return True
        t = ctypes.cast(tp, ctypes.POINTER(GgmlTensor)).contents
        name = t.name.decode("utf-8", "replace")
        if t.type != 0 or not t.data or "(view)" in name or name.startswith("node_"):
            return True  # f32 named tensors only
        ne, nb = list(t.ne), list(t.nb)
        span = sum((ne[i] - 1) * nb[i] for i in range(1, 4)) + ne[0] * 4
        raw = np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_uint8)), shape=(span,))
        a = np.lib.stride_tricks.as_strided(raw, shape=(ne[3], ne[2], ne[1], ne[0] * 4),
                                            strides=(nb[3], nb[2], nb[1], 1)).copy()
        dump[name] = a.view(np.float32).reshape(ne[3], ne[2], ne[1], ne[0]).squeeze()
        return True

    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(args.model.encode(), mp)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = 512
    cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = args.threads
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.cb_eval = cb
    cp.cb_eval_user_data = None
    ctx = llama_cpp.llama_init_from_model(model, cp)
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(ids))) != 0:
        raise SystemExit("llama_decode failed")
    np.savez(args.out, ids=np.asarray(ids, dtype=np.int32), **dump)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    print(f"wrote {args.out}: {len(dump)} tensors")


if __name__ == "__main__":
    main()

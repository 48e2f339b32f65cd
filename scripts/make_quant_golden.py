#!/usr/bin/env python3
"""Writes tests/golden/quants_<type>.bin: raw ggml blocks and the floats that the `gguf`
package's own dequantizer (gguf.quants.dequantize) makes of them. tests/test_quants.c checks
the C reference dequantization against these files, so the test needs no Python.

Blocks come from the model file for the types it holds (real scales and nibble patterns)
and from a seeded generator for every type (random quant bytes, fp16 scales of realistic
magnitude), so every type is covered whether or not the model uses it.

File layout, all little-endian:
  char     magic[4]  "TQQG"
  uint32   version   1
  uint32   type      ggml type id
  uint32   n_blocks
  uint32   block_elems
  uint32   block_bytes
  uint32   n_model   how many of the blocks (the first ones) come from the model
  uint32   reserved  0
  uint8    blocks[n_blocks * block_bytes]
  float32  values[n_blocks * block_elems]

Usage: .venv/bin/python scripts/make_quant_golden.py [model.gguf] [out_dir]
"""
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "gemma3-270m-q4_k_m.gguf")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "golden")

TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
         T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]

# Byte offsets of the fp16 fields inside a block (ggml-common.h), overwritten in random
# blocks so that scales are finite and of the size real models use.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def model_blocks(reader, qtype, want, rng):
    """`want` blocks of `qtype` from tensors of the model, spread over tensors and rows."""
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    tensors = [t for t in reader.tensors if t.tensor_type == qtype]
    if not tensors:
        return b""
    out = []
    for k in range(want):
        t = tensors[k % len(tensors)]
        flat = np.asarray(t.data).reshape(-1).view(np.uint8)
        n_blocks = flat.size // block_bytes
        i = 0 if k < len(tensors) else int(rng.integers(n_blocks))
        out.append(flat[i * block_bytes:(i + 1) * block_bytes].tobytes())
    return b"".join(out)


def random_blocks(qtype, count, rng):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        v = rng.standard_normal(count).astype(np.float32)
        v[:4] = [0.0, -0.0, 1e-40, -3.0e38]  # zeros, a subnormal, a large value
        return v.tobytes()
    if qtype == T.F16:
        bits = rng.integers(0, 0x7C00, count, dtype=np.uint16)  # finite magnitudes
        bits |= (rng.integers(0, 2, count, dtype=np.uint16) << 15).astype(np.uint16)
        bits[:6] = [0x0000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x7C00]  # zeros, subnormals, max, inf
        return bits.tobytes()
    if qtype == T.BF16:
        v = rng.standard_normal(count).astype(np.float32)
        bits = (v.view(np.uint32) >> 16).astype(np.uint16)
        bits[:4] = [0x0000, 0x8000, 0x0001, 0x7F80]
        return bits.tobytes()
    raw = rng.integers(0, 256, (count, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = rng.uniform(-0.05, 0.05, count).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(count, 2)
    return raw.tobytes()


def main():
    rng = np.random.default_rng(20240611)
    reader = GGUFReader(MODEL)
    os.makedirs(OUT, exist_ok=True)
    for qtype in TYPES:
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        if block_elems == 1:
            n_model_want, n_random = 32, 64
        elif block_elems == 32:
            n_model_want, n_random = 8, 16
        else:
            n_model_want, n_random = 4, 4
        if qtype == T.F32:
            # Norm weights are 1-D; take the start of one.
            t = next(t for t in reader.tensors if t.tensor_type == T.F32)
            real = np.asarray(t.data).reshape(-1)[:n_model_want].astype(np.float32).tobytes()
        else:
            real = model_blocks(reader, qtype, n_model_want, rng)
        n_model = len(real) // block_bytes
        blob = real + random_blocks(qtype, n_random, rng)
        n_blocks = len(blob) // block_bytes
        values = dequantize(np.frombuffer(blob, dtype=np.uint8).reshape(n_blocks, block_bytes), qtype)
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        assert values.size == n_blocks * block_elems
        path = os.path.join(OUT, "quants_%s.bin" % qtype.name.lower())
        with open(path, "wb") as f:
            f.write(b"TQQG")
            f.write(struct.pack("<7I", 1, int(qtype), n_blocks, block_elems, block_bytes, n_model, 0))
            f.write(blob)
            f.write(values.astype("<f4").tobytes())
        print("%-8s %3d blocks (%d from the model) -> %s" % (qtype.name, n_blocks, n_model, path))


if __name__ == "__main__":
    main()

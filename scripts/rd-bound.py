#!/usr/bin/env python3
"""What a per-coordinate codebook can reach at a given size (doc/codec.md, "How far a codebook
can go"): mean squared error per unit-variance Gaussian coordinate — what a random rotation makes
every coordinate — of ggml's q4_0 rule (blocks of 32, scale from the largest |x|, 16 levels;
Monte Carlo), of the Lloyd-Max quantizers at 2, 3 and 4 bits (Max 1960's figures, which
tests/test_codebook.c checks our codebooks against), and Shannon's distortion-rate bound
D(R) = 2^(-2R) for a Gaussian source at the bits per coordinate of q4_0 (4.5) and of our turbo3 /
turbo3.5 / turbo4 caches on Gemma 3 (KV bytes per token x 8 / 9216 coordinates, norms and sink
store included). No quantizer of any kind beats D(R) at rate R.

Usage: scripts/rd-bound.py [BLOCKS]   (default 20000 blocks of 32, about 2 s)
"""
import math
import random
import sys


def q4_0_mse(blocks, rng):
    total, n = 0.0, 0
    for _ in range(blocks):
        x = [rng.gauss(0.0, 1.0) for _ in range(32)]
        m = max(x, key=abs)
        d = m / -8.0
        for v in x:
            q = min(15, max(0, math.floor(v / d + 8.5)))
            total += (v - (q - 8) * d) ** 2
            n += 1
    return total / n


def main():
    blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    if blocks < 1:
        sys.exit("usage: scripts/rd-bound.py [BLOCKS >= 1]")
    rng = random.Random(1)
    print(f"q4_0 (4.5 bits/coord), Monte Carlo over {blocks * 32} coordinates: MSE {q4_0_mse(blocks, rng):.5f}")
    for bits, mse in ((2, 0.1175), (3, 0.03454), (4, 0.009497)):
        print(f"Lloyd-Max {bits} bits (Max 1960): MSE {mse:.5f}")
    for name, rate in (("turbo3 on Gemma 3", 3528 * 8 / 9216), ("turbo3.5", 4104 * 8 / 9216),
                       ("turbo4", 4680 * 8 / 9216), ("q4_0", 4.5)):
        print(f"Shannon bound at {rate:.2f} bits/coord ({name}): MSE >= {2 ** (-2 * rate):.5f}")


if __name__ == "__main__":
    main()

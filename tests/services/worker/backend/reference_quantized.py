#!/usr/bin/python3
"""Independent NumPy checks of the 8-bit weight path. Usage:
reference_quantized.py DIR, where DIR holds (little-endian):
  codes.bin    256 f32: the backend's value of each float8_e4m3fn code
  enc_in.bin   f32 values; enc_out.bin: the backend's e4m3 code of each
  meta.txt     "m n k dtype" (dtype I8 or F8_E4M3)
  q.bin        [n, k] weight bytes; scale.bin: [n] f32 row scales
  x.bin        [m, k] f32 activations; y.bin: [m, n] f32, the backend's matmul
Checks, from the formats' definitions: every code decodes to the same value
(NaN codes to NaN); every value encodes to the nearest finite code, ties to
the even code, saturating at 448; y equals bf16(x) @ (q * scale).T within
1e-5 of the sum of |products| per element. Exits 1 naming the first failure."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_llama import decode_e4m3  # noqa: E402


def bf16_round(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def fail(msg):
    print("reference_quantized:", msg)
    sys.exit(1)


def main(d):
    codes = np.fromfile(os.path.join(d, "codes.bin"), dtype="<f4")
    want = decode_e4m3(np.arange(256))
    for c in range(256):
        if np.isnan(want[c]) != np.isnan(codes[c]) or (not np.isnan(want[c]) and want[c] != codes[c]):
            fail(f"code 0x{c:02x}: backend {codes[c]}, reference {want[c]}")

    values = np.fromfile(os.path.join(d, "enc_in.bin"), dtype="<f4").astype(np.float64)
    got = np.fromfile(os.path.join(d, "enc_out.bin"), dtype="u1")
    finite = np.arange(0x7F)  # codes 0..0x7e: the finite magnitudes, increasing
    mags = decode_e4m3(finite)
    for v, g in zip(values, got):
        a = min(abs(v), 448.0)
        dist = np.abs(mags - a)
        best = np.flatnonzero(dist == dist.min())
        code = best[0] if len(best) == 1 else best[best % 2 == 0][0]
        code |= 0x80 if np.signbit(v) else 0
        if code != g:
            fail(f"encode {v!r}: backend 0x{g:02x}, reference 0x{code:02x}")

    m, n, k, dtype = open(os.path.join(d, "meta.txt")).read().split()
    m, n, k = int(m), int(n), int(k)
    raw = np.fromfile(os.path.join(d, "q.bin"), dtype="u1").reshape(n, k)
    q = raw.view(np.int8).astype(np.float64) if dtype == "I8" else decode_e4m3(raw)
    scale = np.fromfile(os.path.join(d, "scale.bin"), dtype="<f4").astype(np.float64)
    w = q * scale[:, None]
    x = bf16_round(np.fromfile(os.path.join(d, "x.bin"), dtype="<f4").reshape(m, k)).astype(np.float64)
    y = np.fromfile(os.path.join(d, "y.bin"), dtype="<f4").reshape(m, n).astype(np.float64)
    ref = x @ w.T
    bound = 1e-5 * (np.abs(x) @ np.abs(w).T) + 1e-30
    bad = np.argwhere(np.abs(y - ref) > bound)
    if len(bad):
        i, j = bad[0]
        fail(f"{dtype} y[{i},{j}] = {y[i, j]}, reference {ref[i, j]} (bound {bound[i, j]})")
    print(f"{dtype}: codec and {m}x{n}x{k} matmul match; max |diff| / bound "
          f"{(np.abs(y - ref) / bound).max():.3g}")


if __name__ == "__main__":
    main(sys.argv[1])

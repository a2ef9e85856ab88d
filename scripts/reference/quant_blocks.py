#!/usr/bin/env python3
"""Known values for specx's ggml block dequantizers, from llama.cpp's `gguf` Python package.

For every block type specx reads, a few blocks of seeded random bytes (scale fields set to
finite f16 values) and their dequantized float32 values as gguf-py computes them. Run in a
throwaway virtualenv (pip install numpy gguf):
    python scripts/reference/quant_blocks.py > crates/decoder/tests/fixtures/quant_blocks.json
"""
import json

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# byte offsets of f16 scale fields within one block
SCALES = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0],
    Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.F16: None, Q.BF16: None, Q.F32: None,
}
rng = np.random.default_rng(20261121)
cases = []
for qt, offs in SCALES.items():
    block, size = GGML_QUANT_SIZES[qt]
    nblocks = 3 if block > 1 else 40
    if qt == Q.F32:
        raw = rng.normal(size=nblocks).astype("<f4").view(np.uint8)
    elif qt == Q.F16:
        raw = rng.normal(size=nblocks).astype("<f2").view(np.uint8)
    elif qt == Q.BF16:
        f = rng.normal(size=nblocks).astype("<f4").view(np.uint32) >> 16
        raw = f.astype("<u2").view(np.uint8)
    else:
        raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
        for b in range(nblocks):
            for o in offs:
                raw[b, o:o + 2] = np.array([rng.uniform(0.001, 0.05)], dtype="<f2").view(np.uint8)
        raw = raw.reshape(-1)
    vals = dequantize(raw.reshape(1, -1) if block == 1 else raw.reshape(1, -1), qt).reshape(-1)
    cases.append({"type": qt.name, "ggml_id": int(qt), "hex": raw.tobytes().hex(), "values": [float(v) for v in vals]})
print(json.dumps({"generator": "scripts/reference/quant_blocks.py (gguf-py dequantize)", "cases": cases}))

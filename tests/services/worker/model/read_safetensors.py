#!/usr/bin/python3
"""An independent safetensors reader (numpy only) for checking Floe's writer.

Usage: read_safetensors.py CHECKPOINT_DIR NAME...
Prints JSON {name: {dtype, shape, first (up to 8 values as floats), sum}} and
exits non-zero on any format violation, also checking what the reference
implementation requires of a file: 8-byte aligned header, tensors laid out
back to back and covering the data section exactly.
"""
import json
import os
import struct
import sys

import numpy as np


def fail(message):
    sys.stderr.write(message + "\n")
    sys.exit(1)


def read_header(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length).decode("utf-8"))
    if length % 8 != 0:
        fail(f"{path}: header length {length} is not a multiple of 8")
    data_size = os.path.getsize(path) - 8 - length
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    end = 0
    for begin, stop in spans:
        if begin != end:
            fail(f"{path}: gap or overlap at offset {begin}")
        end = stop
    if end != data_size:
        fail(f"{path}: tensors cover {end} bytes of a {data_size}-byte data section")
    return length, header


def read_tensor(path, length, entry):
    begin, end = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(8 + length + begin)
        raw = f.read(end - begin)
    dtype = entry["dtype"]
    if dtype == "F32":
        values = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        values = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        fail(f"unexpected dtype {dtype}")
    expected = int(np.prod(entry["shape"], dtype=np.int64))
    if values.size != expected:
        fail(f"{entry}: {values.size} values for shape {entry['shape']}")
    return values.reshape(entry["shape"])


def main():
    directory, names = sys.argv[1], sys.argv[2:]
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
    else:
        weight_map = None
    out = {}
    for name in names:
        shard = weight_map[name] if weight_map is not None else "model.safetensors"
        path = os.path.join(directory, shard)
        length, header = read_header(path)
        entry = header[name]
        values = read_tensor(path, length, entry)
        flat = values.reshape(-1)
        out[name] = {
            "dtype": entry["dtype"],
            "shape": list(values.shape),
            "first": [float(v) for v in flat[:8]],
            "sum": float(flat.astype(np.float64).sum()),
        }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

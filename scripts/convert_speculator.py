#!/usr/bin/env python3
"""Converts an Arctic speculator checkpoint (ArcticTraining's pytorch_model.bin)
to the model.safetensors Floe loads, next to its config.json.

Usage: convert_speculator.py DIR [--out OUT_DIR]
Runs with Debian's python3-torch (no safetensors package needed: the format
is written here: an 8-byte little-endian header length, a JSON header padded
with spaces to a multiple of 8, then each tensor's bytes). Tensors shared
under several names (tied weights) are written once per name, as the
state_dict names them; float16 is widened to float32. Prints one line per
file written.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16"}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:  # numpy has no bf16: its bits as int16
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(state, path):
    header, blobs, offset = {}, [], 0
    for name in sorted(state):
        t = state[name]
        if not isinstance(t, torch.Tensor):
            continue
        if t.dtype == torch.float16:
            t = t.float()
        if t.dtype not in DTYPES:
            sys.exit(f"convert_speculator: {name} has dtype {t.dtype}; float32, bfloat16 and float16 are converted")
        data = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="holds pytorch_model.bin and config.json")
    p.add_argument("--out", help="output folder (default: DIR)")
    a = p.parse_args()
    out = a.out or a.dir
    src = os.path.join(a.dir, "pytorch_model.bin")
    if not os.path.exists(src):
        sys.exit(f"convert_speculator: {src} is missing")
    state = torch.load(src, map_location="cpu")
    if "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    os.makedirs(out, exist_ok=True)
    if os.path.abspath(out) != os.path.abspath(a.dir):
        shutil.copyfile(os.path.join(a.dir, "config.json"), os.path.join(out, "config.json"))
    dest = os.path.join(out, "model.safetensors")
    write_safetensors(state, dest)
    print(f"convert_speculator: wrote {dest} ({len(state)} tensors)")


if __name__ == "__main__":
    main()

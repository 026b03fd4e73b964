#!/usr/bin/python3
"""Independent reference for the CPU backend: the HF Llama/Qwen2/Qwen3 forward
pass written from scratch in PyTorch (f32), from raw little-endian f32 weight
files. Usage: reference_llama.py DIR. DIR holds config.txt ("key value" lines),
<hf tensor name>.bin for each weight (or a model.safetensors, f32/bf16), prompt.bin (int32). Writes
prompt_logits.bin ([len(prompt), vocab] f32), prompt_hidden.bin ([len(prompt),
hidden] f32: the final norm's output, the lm_head's input) and greedy.bin (int32, `steps`
greedy tokens, each from a full recompute over prompt + previous tokens).
With "bf16_linear_inputs 1" every linear layer's input is rounded to bf16 (to
nearest even) first, as HF bf16 inference and the backend's kernels do; the
rest stays f32.

compressed-tensors checkpoints: I8 and F8_E4M3 weights are decoded here from
their bits with NumPy (e4m3fn: sign, 4 exponent bits of bias 7, 3 mantissa
bits, subnormals at exponent 0; Debian's PyTorch has no float8) and multiplied
by their <module>.weight_scale ([rows, 1] per channel or [1] per tensor);
pack-quantized int8 is unpacked from its I32 words (q + 128 per byte, the
first weight in the low byte) and checked against its weight_shape.

SwiftKV ("swiftkv 1", "num_key_value_layers L"; Arctic's LlamaSwiftKVForCausalLM,
SingleInputKV): layers >= L take their queries from q_proj_swiftkv of their own
input norm, and their keys and values from k/v_proj_swiftkv of
norm_swiftkv(the residual stream after layer L-1), for every token. Every
position's output is computed, which equals computing only the positions
whose logits are wanted: a later layer's row depends on no other row."""
import json
import math
import os
import sys

import numpy as np
import torch



def fp8_e4m3(x, scale):
    """x rounded through an e4m3fn code of x / scale, from the format's
    definition: 3 mantissa bits, so the spacing is 2^(floor(log2 |y|) - 3),
    never below the subnormals' 2^-9; ties to even; at most 448."""
    y = x / scale
    a = y.abs()
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    quantum = torch.pow(2.0, torch.clamp(e - 4, min=-9).to(torch.float32))
    r = torch.clamp(torch.round(a / quantum) * quantum, max=448.0)
    return torch.sign(y) * r * scale

def decode_e4m3(bits):
    """float8_e4m3fn bytes to float64, from the format's definition."""
    bits = bits.astype(np.int64)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent = (bits >> 3) & 0xF
    mantissa = (bits & 0x7).astype(np.float64)
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent.astype(np.float64) - 7.0)
    subnormal = (mantissa / 8.0) * 2.0 ** -6
    value = sign * np.where(exponent == 0, subnormal, normal)
    return np.where((bits & 0x7F) == 0x7F, np.nan, value)


def load(d, cfg=None):
    """The model in DIR as (final_hidden, logits): final_hidden(ids) is the
    final norm's output for every position ([len(ids), hidden]), logits(h) the
    lm_head over such rows. cfg: the config.txt keys (read from DIR when None)."""
    if cfg is None:
        cfg = {}
        with open(os.path.join(d, "config.txt")) as f:
            for line in f:
                k, v = line.split()
                cfg[k] = v
    hidden = int(cfg["hidden_size"]); heads = int(cfg["num_heads"]); kv_heads = int(cfg["num_kv_heads"])
    hd = int(cfg["head_dim"]); layers = int(cfg["num_layers"]); vocab = int(cfg["vocab_size"])
    inter = int(cfg["intermediate_size"]); eps = float(cfg["rms_norm_eps"]); theta = float(cfg["rope_theta"])
    bias = cfg["attention_bias"] == "1"; qk_norm = cfg["qk_norm"] == "1"
    tied = cfg["tie_word_embeddings"] == "1"
    bf16_inputs = cfg.get("bf16_linear_inputs", "0") == "1"
    swiftkv = cfg.get("swiftkv", "0") == "1"
    # "kv_bf16 1": the KV cache holds bf16 (K after RoPE, V), rounded to
    # nearest even once and read back widened, as the backend's bf16 cache.
    kv_bf16 = cfg.get("kv_bf16", "0") == "1"
    # "kv_fp8 1": it holds OCP fp8 e4m3fn codes of K / kv_fp8_k_scale and
    # V / kv_fp8_v_scale (nearest even, saturated at 448), read back times
    # the scale, as vLLM's fp8_e4m3 cache.
    kv_fp8 = cfg.get("kv_fp8", "0") == "1"
    k_scale = float(cfg.get("kv_fp8_k_scale", "1"))
    v_scale = float(cfg.get("kv_fp8_v_scale", "1"))
    kv_layers = int(cfg["num_key_value_layers"]) if swiftkv else layers

    def lin(x, weight):
        if bf16_inputs:
            x = x.to(torch.bfloat16).to(torch.float32)
        return x @ weight.T

    st_path = os.path.join(d, "model.safetensors")
    if os.path.exists(st_path):  # a checkpoint folder (single file): read it directly
        with open(st_path, "rb") as f:
            raw = f.read()
        header_len = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + header_len])
        base = 8 + header_len

    def w(name, shape):
        if not os.path.exists(st_path):
            return torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype="<f4").reshape(shape))
        module = name[:-len(".weight")]
        if name not in header and module + ".weight_packed" in header:
            # pack-quantized int8: I32 words, four weights each from the low
            # byte up, every weight stored as q + 128; weight_shape its shape.
            meta = header[module + ".weight_packed"]
            begin, end = meta["data_offsets"]
            words = np.frombuffer(raw[base + begin:base + end], dtype="<i4")
            codes = np.stack([(words >> (8 * i)) & 0xFF for i in range(4)], axis=-1).reshape(meta["shape"][0], -1)
            q = (codes.astype(np.int64) - 128).astype(np.float64)
            stored_shape = w(module + ".weight_shape", None).numpy()
            assert list(stored_shape) == list(shape), (name, stored_shape, shape)
            scale = w(module + ".weight_scale", None).numpy().astype(np.float64)
            scale = scale.reshape(shape[0], 1) if scale.size == shape[0] else scale.reshape(1, 1)
            return torch.from_numpy((q[:, :shape[1]] * scale).astype(np.float32))
        meta = header[name]
        begin, end = meta["data_offsets"]
        buf = raw[base + begin:base + end]
        if meta["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4")
        elif meta["dtype"] == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif meta["dtype"] == "I64":  # a packed weight's weight_shape
            arr = np.frombuffer(buf, dtype="<i8")
        elif meta["dtype"] in ("I8", "F8_E4M3"):
            if meta["dtype"] == "I8":
                q = np.frombuffer(buf, dtype="i1").astype(np.float64)
            else:
                q = decode_e4m3(np.frombuffer(buf, dtype="u1"))
            scale = w(name[:-len(".weight")] + ".weight_scale", None).numpy().astype(np.float64)
            rows = shape[0]
            scale = scale.reshape(rows, 1) if scale.size == rows else scale.reshape(1, 1)
            arr = (q.reshape(shape) * scale).astype(np.float32)
        else:
            raise ValueError(meta["dtype"])
        if shape is None:  # a scale: whatever shape it was written with
            return torch.from_numpy(arr.copy())
        assert list(meta["shape"]) == list(shape), (name, meta["shape"], shape)
        return torch.from_numpy(arr.copy().reshape(shape))

    # Rotary inverse frequencies: HF _compute_default/_compute_llama3_parameters.
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    if cfg.get("rope_type") == "llama3":
        factor = float(cfg["rope_factor"]); low = float(cfg["low_freq_factor"])
        high = float(cfg["high_freq_factor"]); old = float(cfg["original_max_position_embeddings"])
        low_wl = old / low; high_wl = old / high
        wavelen = 2 * math.pi / inv_freq
        inv_l = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        inv_freq = torch.where(medium, smoothed, inv_l)

    def rms(x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(var + eps))

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., : hd // 2]), dim=-1)

    embed = w("model.embed_tokens.weight", (vocab, hidden))
    lm_head = embed if tied else w("lm_head.weight", (vocab, hidden))
    final_norm = w("model.norm.weight", (hidden,))
    L = []
    for i in range(layers):
        p = f"model.layers.{i}."
        lw = {
            "in": w(p + "input_layernorm.weight", (hidden,)),
            "post": w(p + "post_attention_layernorm.weight", (hidden,)),
            "q": w(p + "self_attn.q_proj.weight", (heads * hd, hidden)),
            "k": w(p + "self_attn.k_proj.weight", (kv_heads * hd, hidden)),
            "v": w(p + "self_attn.v_proj.weight", (kv_heads * hd, hidden)),
            "o": w(p + "self_attn.o_proj.weight", (hidden, heads * hd)),
            "gate": w(p + "mlp.gate_proj.weight", (inter, hidden)),
            "up": w(p + "mlp.up_proj.weight", (inter, hidden)),
            "down": w(p + "mlp.down_proj.weight", (hidden, inter)),
        }
        if bias:
            lw["qb"] = w(p + "self_attn.q_proj.bias", (heads * hd,))
            lw["kb"] = w(p + "self_attn.k_proj.bias", (kv_heads * hd,))
            lw["vb"] = w(p + "self_attn.v_proj.bias", (kv_heads * hd,))
        if qk_norm:
            lw["qn"] = w(p + "self_attn.q_norm.weight", (hd,))
            lw["kn"] = w(p + "self_attn.k_norm.weight", (hd,))
        if i >= kv_layers:
            lw["q"] = w(p + "self_attn.q_proj_swiftkv.weight", (heads * hd, hidden))
            lw["k_swiftkv"] = w(p + "self_attn.k_proj_swiftkv.weight", (kv_heads * hd, hidden))
            lw["v_swiftkv"] = w(p + "self_attn.v_proj_swiftkv.weight", (kv_heads * hd, hidden))
        L.append(lw)
    norm_swiftkv = w("model.norm_swiftkv.weight", (hidden,)) if kv_layers < layers else None

    def final_hidden(ids):
        T = len(ids)
        x = embed[torch.tensor(ids, dtype=torch.long)]
        pos = torch.arange(T, dtype=torch.float32)
        freqs = pos[:, None] @ inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.full((T, T), float("-inf")).triu(1)
        for i, lw in enumerate(L):
            h = rms(x, lw["in"])
            if i < kv_layers:
                q = lin(h, lw["q"]); k = lin(h, lw["k"]); v = lin(h, lw["v"])
            else:
                if i == kv_layers:
                    swiftkv_in = rms(x, norm_swiftkv)
                q = lin(h, lw["q"]); k = lin(swiftkv_in, lw["k_swiftkv"]); v = lin(swiftkv_in, lw["v_swiftkv"])
            if bias:
                q = q + lw["qb"]; k = k + lw["kb"]; v = v + lw["vb"]
            q = q.view(T, heads, hd).transpose(0, 1)
            k = k.view(T, kv_heads, hd).transpose(0, 1)
            v = v.view(T, kv_heads, hd).transpose(0, 1)
            if qk_norm:
                q = rms(q, lw["qn"]); k = rms(k, lw["kn"])
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if kv_bf16:
                k = k.to(torch.bfloat16).float(); v = v.to(torch.bfloat16).float()
            if kv_fp8:
                k = fp8_e4m3(k, k_scale); v = fp8_e4m3(v, v_scale)
            rep = heads // kv_heads
            k = k.repeat_interleave(rep, dim=0); v = v.repeat_interleave(rep, dim=0)
            att = (q @ k.transpose(1, 2)) * (hd ** -0.5) + mask
            att = torch.softmax(att, dim=-1, dtype=torch.float32)
            o = (att @ v).transpose(0, 1).reshape(T, heads * hd)
            x = x + lin(o, lw["o"])
            h = rms(x, lw["post"])
            x = x + lin(torch.nn.functional.silu(lin(h, lw["gate"])) * lin(h, lw["up"]), lw["down"])
        return rms(x, final_norm)

    return final_hidden, lambda h: lin(h, lm_head)


def main(d):
    final_hidden, logits = load(d)
    with open(os.path.join(d, "config.txt")) as f:
        steps = int(dict(line.split() for line in f)["steps"])

    def forward(ids):
        return logits(final_hidden(ids))

    prompt = np.fromfile(os.path.join(d, "prompt.bin"), dtype="<i4").tolist()
    with torch.no_grad():
        hidden = final_hidden(prompt)
        hidden.numpy().astype("<f4").tofile(os.path.join(d, "prompt_hidden.bin"))
        logits(hidden).numpy().astype("<f4").tofile(os.path.join(d, "prompt_logits.bin"))
        ids = list(prompt); out = []
        for _ in range(steps):
            nxt = int(forward(ids)[-1].argmax())
            out.append(nxt); ids.append(nxt)
    np.array(out, dtype="<i4").tofile(os.path.join(d, "greedy.bin"))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1])

#!/usr/bin/env python3
"""Trains an Arctic speculator (sum_lstm) on a model's own greedy outputs, on
CPU, and writes it in the real checkpoint format (config.json,
pytorch_model.bin, model.safetensors) for `floe-worker --speculative lstm
--speculator OUT`.

As ArcticTraining does: the base model is frozen; it generates the training
data itself (greedy continuations of trace prompts); the speculator learns
teacher-forced, loss = sum over heads i of CE(head_i(hidden_t, tokens t+1..
t+i+1), token t+i+2), over the generated positions only. AdamW (lr 1e-3,
weight decay 0.1, betas 0.9/0.999), cosine schedule with 5% warmup.

One departure, for speed: the softmax runs over the tokens that occur in the
training sequences, not the whole vocabulary (Debian's CPU BLAS multiplies
at a few GFLOP/s, and a 128k-row head would take seconds per step); the head
rows of every other token are zeroed (logit 0), so they win only where every
trained token scores below 0.

The base model's forward is tests/services/worker/backend/reference_llama.py
(PyTorch, written from the HF definition; bf16 checkpoints round each Linear's
input to bf16 as Floe's kernels do), so the hidden states are the ones the
worker exports. Prompts come from JSON Lines traces (`prompt` token ids),
skipping each trace's first --skip requests (kept for evaluation) and keeping
the last --prompt-tokens tokens of each.

Usage:
  train_speculator.py --model DIR --out DIR [--traces A.jsonl,B.jsonl]
      [--skip 40] [--train-requests 120] [--prompt-tokens 192]
      [--new-tokens 96] [--minutes 8] [--batch 256] [--seed 0]
Progress on stderr; a JSON summary on stdout.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "../tests/services/worker/backend"))
import reference_llama  # noqa: E402
from convert_speculator import write_safetensors  # noqa: E402
from speculator_model import Speculator  # noqa: E402


def reference_config(config):
    """config.json -> reference_llama's config.txt keys."""
    c = {
        "hidden_size": config["hidden_size"],
        "num_heads": config["num_attention_heads"],
        "num_kv_heads": config.get("num_key_value_heads", config["num_attention_heads"]),
        "head_dim": config.get("head_dim", config["hidden_size"] // config["num_attention_heads"]),
        "num_layers": config["num_hidden_layers"],
        "vocab_size": config["vocab_size"],
        "intermediate_size": config["intermediate_size"],
        "rms_norm_eps": config.get("rms_norm_eps", 1e-5),
        "rope_theta": config.get("rope_theta", 10000.0),
        "attention_bias": int(bool(config.get("attention_bias", False))),
        "qk_norm": 0,
        "tie_word_embeddings": int(bool(config.get("tie_word_embeddings", False))),
        "bf16_linear_inputs": int(config.get("torch_dtype") == "bfloat16"),
    }
    if config.get("architectures", [""])[0] not in ("LlamaForCausalLM", "MistralForCausalLM"):
        sys.exit(f"train_speculator: {config.get('architectures')} is not a Llama model")
    rs = config.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        c.update({"rope_type": "llama3", "rope_factor": rs["factor"], "low_freq_factor": rs["low_freq_factor"],
                  "high_freq_factor": rs["high_freq_factor"],
                  "original_max_position_embeddings": rs["original_max_position_embeddings"]})
    return {k: str(v) for k, v in c.items()}


def load_prompts(paths, skip, count, prompt_tokens):
    prompts = []
    for path in paths:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for row in rows[skip:skip + count]:
            prompts.append(row["prompt"][-prompt_tokens:])
    return prompts


def log(msg):
    print(f"[train_speculator] {msg}", file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the base model folder (config.json, model.safetensors)")
    p.add_argument("--out", required=True)
    here_traces = os.path.join(HERE, "../../shared/traces")
    p.add_argument("--traces", default=",".join(os.path.join(here_traces, t)
                                                for t in ("dev-agentic.jsonl", "dev-chat.jsonl")))
    p.add_argument("--skip", type=int, default=40, help="requests per trace left out (for evaluation)")
    p.add_argument("--train-requests", type=int, default=80, help="requests per trace to train on")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--n-predict", type=int, default=3)
    p.add_argument("--dim", type=int, default=0, help="inner = emb = proj dim (0: the model's hidden size)")
    p.add_argument("--minutes", type=float, default=8.0, help="training time budget")
    p.add_argument("--max-iters", type=int, default=3000)
    p.add_argument("--batch", type=int, default=64, help="positions per step")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t_start = time.time()

    with open(os.path.join(a.model, "config.json")) as f:
        config = json.load(f)
    final_hidden, logits = reference_llama.load(a.model, reference_config(config))
    prompts = load_prompts(a.traces.split(","), a.skip, a.train_requests, a.prompt_tokens)
    log(f"{len(prompts)} prompts; generating {a.new_tokens} greedy tokens each with the base model")

    # The model's own greedy continuations, then every position's hidden state.
    hiddens, sequences, starts = [], [], []
    with torch.no_grad():
        for n, prompt in enumerate(prompts):
            ids = list(prompt)
            for _ in range(a.new_tokens):
                ids.append(int(logits(final_hidden(ids)[-1:]).argmax()))
            hiddens.append(final_hidden(ids))
            sequences.append(torch.tensor(ids, dtype=torch.long))
            starts.append(len(prompt))
            if (n + 1) % 20 == 0:
                log(f"  generated {n + 1}/{len(prompts)} ({time.time() - t_start:.0f} s)")
    gen_s = time.time() - t_start

    # Training positions t: hidden h_t produced token t+1; head i reads tokens
    # t+1..t+1+i and predicts t+2+i, all inside the generated part.
    k = a.n_predict
    positions = [(s, t) for s, seq in enumerate(sequences)
                 for t in range(starts[s] - 1, len(seq) - k - 1)]
    log(f"{len(positions)} training positions")
    hidden_size = config["hidden_size"]
    dim = a.dim or hidden_size
    spec_config = {
        "architectures": ["ArcticLSTMSpeculatorPreTrainedModel"],
        "base_model_name_or_path": os.path.abspath(a.model),
        "input_hidden_dim": hidden_size,
        "inner_dim": str(dim), "proj_dim": str(dim), "emb_dim": str(dim),
        "model_type": "mlp_speculator",
        "n_candidates": k, "n_predict": k,
        "scale_input": True, "tie_weights": True, "tie_lstm_embs": True,
        "top_k_tokens_per_head": [1] * k,
        "torch_dtype": "float32",
        "vocab_size": config["vocab_size"],
        "method": "sum_lstm",
    }
    model = Speculator(spec_config)
    model.randomize(torch.Generator().manual_seed(a.seed))
    for m in model.modules():  # the trainer's reset_parameters: norms start at weight 1, bias 0
        if hasattr(m, "affine") and m.affine:
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()
    active = torch.unique(torch.cat(sequences))
    to_active = torch.full((config["vocab_size"],), -1, dtype=torch.long)
    to_active[active] = torch.arange(len(active))
    log(f"softmax over the {len(active)} tokens of the training sequences")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.1)
    iters = a.max_iters
    warmup = max(1, int(0.05 * iters))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: (i + 1) / warmup if i < warmup else 0.5 * (1 + math.cos(math.pi * (i - warmup) / max(1, iters - warmup))))
    loss_fn = torch.nn.CrossEntropyLoss()
    deadline = time.time() + a.minutes * 60
    it, losses = 0, []
    while it < iters and time.time() < deadline:
        batch = random.sample(positions, min(a.batch, len(positions)))
        state = torch.stack([hiddens[s][t] for s, t in batch])[:, None, :]
        inds = torch.stack([sequences[s][t + 1:t + 2 + k] for s, t in batch])  # tokens t+1 .. t+1+k
        preds = model(state, inds, head_rows=active)  # [k, b, 1, len(active)]
        loss = sum(loss_fn(preds[i, :, 0], to_active[inds[:, i + 1]]) for i in range(k))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss))
        it += 1
        if it % 50 == 0:
            log(f"  iter {it}: loss {sum(losses[-50:]) / 50:.3f} ({time.time() - t_start:.0f} s)")

    with torch.no_grad():
        keep = torch.zeros(config["vocab_size"], dtype=torch.bool)
        keep[active] = True
        model.head[0].weight[~keep] = 0.0
    # Training-set acceptance per position (greedy chain, as served).
    with torch.no_grad():
        sample = random.sample(positions, min(2000, len(positions)))
        state = torch.stack([hiddens[s][t] for s, t in sample])
        first = torch.stack([sequences[s][t + 1] for s, t in sample])
        drafts, _ = model.generate(state, first, k)
        want = torch.stack([sequences[s][t + 2:t + 2 + k] for s, t in sample])
        chain = torch.cumprod((drafts == want).float(), dim=1).mean(0).tolist()

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(spec_config, f, indent=2)
    state_dict = model.state_dict()
    torch.save(state_dict, os.path.join(a.out, "pytorch_model.bin"))
    write_safetensors(state_dict, os.path.join(a.out, "model.safetensors"))
    summary = {"out": a.out, "prompts": len(prompts), "positions": len(positions), "iterations": it,
               "softmax_tokens": len(active),
               "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
               "train_chain_acceptance_per_position": chain,
               "generate_s": round(gen_s, 1), "total_s": round(time.time() - t_start, 1)}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch reference for Floe's Arctic speculator (lstm_speculator.h).

The module (scripts/speculator_model.py) is written from ArcticTraining's
ArcticLSTMSpeculator (projects/arctic_lstm_speculator/speculator/speculator.py):
the same parameters under the same state_dict names, so the checkpoint saved
here is the real format (pytorch_model.bin + config.json, dims as strings).
Generation follows Arctic Inference's serving loop (generate_token_ids): from
the target's hidden state and last token, n_predict recurrent steps, argmax
each.

Usage: reference_speculator.py OUT_DIR --method sum_lstm|sum_rnn [options]
Writes OUT_DIR/{config.json, pytorch_model.bin, inputs_hidden.f32,
inputs_tokens.i32, expected_tokens.i32, expected_states.f32, meta.json}.
With --dtype bf16 the weights are saved in bf16, and the forward rounds every
Linear's input to bf16 (products and sums in f32), Floe's stated contract.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../scripts"))
from speculator_model import Linear, Speculator  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--method", default="sum_lstm")
    p.add_argument("--n-predict", type=int, default=3)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--inner", default="48")
    p.add_argument("--emb", default=None)
    p.add_argument("--proj", default=None)
    p.add_argument("--tie-weights", action="store_true")
    p.add_argument("--tie-lstm-embs", action="store_true")
    p.add_argument("--scale-input", action="store_true")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    c = {
        "architectures": ["ArcticLSTMSpeculatorPreTrainedModel"],
        "base_model_name_or_path": "floe-test",
        "input_hidden_dim": a.hidden,
        "inner_dim": str(a.inner),
        "proj_dim": str(a.proj or a.inner.split(".")[0]),
        "emb_dim": str(a.emb or a.inner.split(".")[0]),
        "model_type": "mlp_speculator",
        "n_candidates": a.n_predict,
        "n_predict": a.n_predict,
        "scale_input": a.scale_input,
        "tie_weights": a.tie_weights,
        "tie_lstm_embs": a.tie_lstm_embs,
        "top_k_tokens_per_head": [1] * a.n_predict,
        "torch_dtype": "bfloat16" if a.dtype == "bf16" else "float32",
        "vocab_size": a.vocab,
        "method": a.method,
    }
    gen = torch.Generator().manual_seed(a.seed)
    model = Speculator(c)
    model.randomize(gen)
    if a.dtype == "bf16":
        for t in model.parameters():
            t.data = t.data.to(torch.bfloat16)
        Linear.round_bf16 = True
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f)
    torch.save(model.state_dict(), os.path.join(a.out, "pytorch_model.bin"))
    for t in model.parameters():  # compute in f32 (bf16 weights widen exactly)
        t.data = t.data.float()
    hidden = torch.randn(a.batch, a.hidden, generator=gen) * 2.0
    tokens = torch.randint(0, a.vocab, (a.batch,), generator=gen)
    drafts, states = model.generate(hidden, tokens, a.n_predict)
    # The trainer's teacher-forced pass over the drafted chain predicts the
    # same tokens (scripts/train_speculator.py trains with it).
    with torch.no_grad():
        forced = model(hidden[:, None, :], torch.cat([tokens[:, None], drafts], dim=1))
    assert torch.equal(forced.argmax(-1)[:, :, 0].T, drafts), "forward and generate disagree"
    hidden.numpy().astype("float32").tofile(os.path.join(a.out, "inputs_hidden.f32"))
    tokens.numpy().astype("int32").tofile(os.path.join(a.out, "inputs_tokens.i32"))
    drafts.numpy().astype("int32").tofile(os.path.join(a.out, "expected_tokens.i32"))
    states.numpy().astype("float32").tofile(os.path.join(a.out, "expected_states.f32"))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"batch": a.batch, "steps": a.n_predict, "state_dim": model.inner_dim[-1]}, f)


if __name__ == "__main__":
    main()

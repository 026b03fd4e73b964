#!/usr/bin/env python3
"""PyTorch reference for Floe's Arctic speculator (lstm_speculator.h).

The module below is written from ArcticTraining's ArcticLSTMSpeculator
(projects/arctic_lstm_speculator/speculator/speculator.py): the same
parameters under the same state_dict names, so the checkpoint it saves is the
real format (pytorch_model.bin + config.json, dims as strings). Generation
follows Arctic Inference's serving loop (generate_token_ids): from the target's
hidden state and last token, n_predict recurrent steps, argmax each.

Usage: reference_speculator.py OUT_DIR --method sum_lstm|sum_rnn [options]
Writes OUT_DIR/{config.json, pytorch_model.bin, inputs_hidden.f32,
inputs_tokens.i32, expected_tokens.i32, expected_states.f32, meta.json}.
With --dtype bf16 the weights are saved in bf16, and the forward rounds every
Linear's input to bf16 (products and sums in f32), Floe's stated contract.
"""
import argparse
import json
import math
import os

import torch
import torch.nn as nn


def parse_dim(s):
    return [int(i) for i in str(s).split(".")]


class LN(nn.Module):
    """LayerNormParameterized without centring: x * rsqrt(mean(x^2) + eps) * w + b."""

    def __init__(self, dim, affine=True, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.empty(dim))
            self.bias = nn.Parameter(torch.empty(dim))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.affine:
            x = self.weight * x + self.bias
        return x


class Linear(nn.Linear):
    round_bf16 = False

    def forward(self, x):
        if Linear.round_bf16:
            x = x.to(torch.bfloat16).float()
        return nn.functional.linear(x, self.weight.float())


class Speculator(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_predict = c["n_predict"]
        self.method = c["method"]
        self.tie_weights = c["tie_weights"]
        self.tie_lstm_embs = c["tie_lstm_embs"]
        self.scale_input = c["scale_input"]
        inner, emb, proj = parse_dim(c["inner_dim"]), parse_dim(c["emb_dim"]), parse_dim(c["proj_dim"])
        self.inner_dim = inner
        V, H = c["vocab_size"], c["input_hidden_dim"]
        act = nn.GELU()
        if self.method == "sum_rnn":
            embs, projs, lns = [], [], []
            for n in range(self.n_predict):
                if not self.tie_weights or n == 0:
                    seq = [nn.Embedding(V, emb[0])]
                    for i in range(1, len(emb)):
                        seq += [LN(emb[i]), act, Linear(emb[i - 1], emb[i], bias=False)]
                    embs.append(nn.Sequential(*seq))
                if not self.tie_weights or n <= 1:
                    seq = [Linear(H if n == 0 else inner[-1], proj[0], bias=False)]
                    for i in range(1, len(proj)):
                        seq += [LN(proj[i]), act, Linear(proj[i - 1], proj[i], bias=False)]
                    projs.append(nn.Sequential(*seq))
                if not self.tie_weights or n == 0:
                    seq = [LN(inner[0])]
                    for i in range(1, len(inner)):
                        seq += [act, Linear(inner[i - 1], inner[i], bias=False), LN(inner[i])]
                    lns.append(nn.Sequential(*seq))
            self.emb, self.proj, self.ln = nn.ModuleList(embs), nn.ModuleList(projs), nn.ModuleList(lns)
        else:
            assert self.tie_weights
            self.forget_emb = nn.ModuleList([nn.Embedding(V, emb[0])])
            if self.tie_lstm_embs:
                self.input_emb = self.cell_emb = self.output_emb = self.forget_emb
            else:
                self.input_emb = nn.ModuleList([nn.Embedding(V, emb[0])])
                self.cell_emb = nn.ModuleList([nn.Embedding(V, emb[0])])
                self.output_emb = nn.ModuleList([nn.Embedding(V, emb[0])])
            for gate in ("forget", "input", "cell", "output"):
                setattr(self, gate + "_proj", nn.ModuleList([Linear(H, proj[0], bias=False),
                                                             Linear(inner[-1], proj[0], bias=False)]))
            self.cell_ln = nn.ModuleList([LN(inner[0])])
            self.state_ln = nn.ModuleList([LN(inner[0])])
        if self.scale_input:
            self.ln0 = LN(H, affine=False)
        self.head = nn.ModuleList([Linear(inner[-1], V, bias=False) for _ in range(self.n_predict)])
        self.state_weight = 0.5 ** (0.5 / self.n_predict)
        self.emb_weight = math.sqrt((1 - self.state_weight ** 2) * (emb[-1] / 2))
        if self.tie_weights and self.n_predict > 1:
            for head in self.head:
                head.weight = self.head[0].weight
        self.act = act

    def randomize(self, gen):
        for m in self.modules():
            if isinstance(m, (nn.Embedding, nn.Linear)):
                m.weight.data = torch.randn(m.weight.shape, generator=gen) / math.sqrt(min(m.weight.shape))
            elif isinstance(m, LN) and m.affine:
                m.weight.data = 1 + 0.2 * torch.randn(m.weight.shape, generator=gen)
                m.bias.data = 0.2 * torch.randn(m.bias.shape, generator=gen)
        if self.tie_weights and self.n_predict > 1:
            for head in self.head:
                head.weight = self.head[0].weight

    @torch.no_grad()
    def generate(self, hidden, tokens, steps):
        """Arctic Inference's generate_token_ids over this module's parameters."""
        alpha = self.emb_weight / self.state_weight
        state = hidden
        if self.scale_input:
            state = self.ln0(state) / (2 ** 0.5)
        cell = torch.zeros(hidden.shape[0], self.inner_dim[-1])
        out, states = [], []
        for k in range(steps):
            ai = 0 if self.tie_weights else k
            pi = 1 if self.tie_weights and k >= 2 else k
            if self.method == "sum_lstm":
                prev = state
                gate = lambda name: getattr(self, name + "_proj")[pi](prev) + alpha * getattr(self, name + "_emb")[ai](tokens).float()
                f = torch.sigmoid(gate("forget"))
                i = torch.sigmoid(gate("input"))
                cand = self.act(self.cell_ln[ai](gate("cell"))) * i
                o = torch.sigmoid(gate("output"))
                cell = cell * f + cand
                state = self.act(self.state_ln[ai](cell)) * o
            else:
                z = self.emb[ai](tokens).float() if len(self.emb[ai]) == 1 else self.emb[ai](tokens)
                state = self.proj[pi](state) + alpha * z
                state = self.act(self.ln[ai](state))
            logits = self.head[k](state)
            tokens = torch.argmax(logits, dim=-1)
            out.append(tokens)
            states.append(state.clone())
        return torch.stack(out, dim=1), torch.stack(states, dim=0)


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
    hidden.numpy().astype("float32").tofile(os.path.join(a.out, "inputs_hidden.f32"))
    tokens.numpy().astype("int32").tofile(os.path.join(a.out, "inputs_tokens.i32"))
    drafts.numpy().astype("int32").tofile(os.path.join(a.out, "expected_tokens.i32"))
    states.numpy().astype("float32").tofile(os.path.join(a.out, "expected_states.f32"))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"batch": a.batch, "steps": a.n_predict, "state_dim": model.inner_dim[-1]}, f)


if __name__ == "__main__":
    main()

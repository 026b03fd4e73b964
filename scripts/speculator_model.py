"""Arctic's speculator as a PyTorch module (for Floe's tests and
scripts/train_speculator.py), written from ArcticTraining's
ArcticLSTMSpeculator (projects/arctic_lstm_speculator/speculator/speculator.py):
the same parameters under the same state_dict names, so a saved state_dict is
the real checkpoint format. `generate` follows Arctic Inference's serving loop
(generate_token_ids), `forward` the trainer's teacher-forced pass.
"""
import math

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

    def forward(self, state, inds, head_rows=None):
        """The trainer's teacher-forced pass: state [b, n, d] (the target's
        hidden states), inds [b, n + n_predict] (inds[:, t] is the token
        state[:, t] produced); logits [n_predict, b, n, vocab], or over the
        vocabulary rows `head_rows` only (a LongTensor) when given."""
        alpha = self.emb_weight / self.state_weight
        if self.scale_input:
            state = self.ln0(state) / (2 ** 0.5)
        n = state.size(1)
        out = []
        cell = torch.zeros(state.shape[0], n, self.inner_dim[-1], dtype=state.dtype)
        for i in range(self.n_predict):
            ai = 0 if self.tie_weights else i
            pi = 1 if self.tie_weights and i >= 2 else i
            tok = inds[:, i:i + n]
            if self.method == "sum_lstm":
                prev = state
                gate = lambda name: getattr(self, name + "_proj")[pi](prev) + alpha * getattr(self, name + "_emb")[ai](tok)
                f = torch.sigmoid(gate("forget"))
                ig = torch.sigmoid(gate("input"))
                cand = self.act(self.cell_ln[ai](gate("cell"))) * ig
                o = torch.sigmoid(gate("output"))
                cell = cell * f + cand
                state = self.act(self.state_ln[ai](cell)) * o
            else:
                state = self.act(self.ln[ai](self.proj[pi](state) + alpha * self.emb[ai](tok)))
            if head_rows is None:
                out.append(self.head[i](state))
            else:
                out.append(nn.functional.linear(state, self.head[i].weight[head_rows]))
        return torch.stack(out, dim=0)

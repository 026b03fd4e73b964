#!/usr/bin/env python3
"""Runs the commands README.md and deploy/README.md show, so that none can rot.

    readme_commands_test.py    (FLOE_SOURCE_DIR, FLOE_BINARY_DIR, FLOE_TRACE_DIR)

Every line of every ```sh block runs, in the order the files show them, except
the lines CANNOT_RUN names with its reason (a new line that is neither fails
the test). Placeholders become test inputs: the checkpoint path becomes the
folder the README's own `floe make-model` line writes (make-model lines run
first), the trace path a dev trace, /tmp/ and /var/lib/floe/ a scratch folder, port 50051 a free
port (8000, the HTTP API's, another). A `floe local` line runs in the background until "router listening on";
the commands after it talk to it; at the end it must stop cleanly on SIGTERM.
Each command must exit 0, and the ones with a checkable product are checked
(the bench JSON's counts, the replay's JSON, the rendered chart's kinds).

The binaries table is checked too: every flag a row shows must be in that
binary's --help.
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("FLOE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("FLOE_BINARY_DIR", os.path.join(ROOT, "build"))
_BESIDE = os.path.join(ROOT, "..", "shared", "traces")
TRACE = os.path.join(os.environ.get("FLOE_TRACE_DIR", _BESIDE if os.path.isdir(_BESIDE) else "/work/shared/traces"),
                     "dev-agentic.jsonl")
DOCS = ["README.md", "deploy/README.md"]

CANNOT_RUN = [
    (r"^scripts/(demo|test)\.sh\b", "the README's two commands: .ci/run runs them"),
    (r"^(helm install|kubectl)\b", "needs a Kubernetes cluster"),
    (r"^docker\b", "no Docker on the build machines"),
]

errors = []


def fail(msg):
    print("FAIL:", msg, flush=True)
    errors.append(msg)


def sh_lines(path):
    """Command lines of the file's ```sh blocks (continuations joined, comments dropped)."""
    lines, block, pending = [], False, ""
    with open(os.path.join(ROOT, path)) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.strip().startswith("```"):
                block = line.strip() == "```sh" if not block else False
                continue
            if not block:
                continue
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # trailing comment
            if not line or line.startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            lines.append(pending + line)
            pending = ""
    return lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_table_flags():
    """Every --flag a row of README's binaries table shows is in that binary's --help."""
    text = open(os.path.join(ROOT, "README.md")).read()
    table = text[text.index("## Binaries"):]
    table = table[:table.index("\n## ", 1)]
    checked = 0
    for row in re.findall(r"^\| `([^`]+)`", table, re.M):
        words = row.replace("\\|", "|").split()
        # "floe local ...", "floe tokenize ... / floe detokenize ...", "floe-worker ..."
        binary = [words[0]] + ([words[1]] if words[0] == "floe" else [])
        flags = set(re.findall(r"(--[a-z0-9-]+)", row.split(" / ")[0]))
        out = subprocess.run([os.path.join(BUILD, "bin", binary[0])] + binary[1:] + ["--help"],
                             capture_output=True, text=True, timeout=30)
        known = set(re.findall(r"(--[a-z0-9-]+)", out.stdout + out.stderr))
        for flag in sorted(flags - known):
            fail(f"README table: `{' '.join(binary)}` shows {flag}, which its --help does not list")
        checked += 1
    if checked < 6:
        fail(f"README table: only {checked} rows found")
    print(f"ok: binaries table, {checked} rows' flags in --help", flush=True)


def main():
    check_table_flags()
    tmp = tempfile.mkdtemp(prefix="floe-readme-")
    port = str(free_port())
    http_port = str(free_port())
    model_dir = None
    commands = []
    for doc in DOCS:
        for line in sh_lines(doc):
            reason = next((r for p, r in CANNOT_RUN if re.search(p, line)), None)
            if reason:
                print(f"not run ({reason}): {doc}: {line}", flush=True)
            else:
                commands.append((doc, line))
    if len(commands) < 6:
        fail(f"only {len(commands)} commands found in {DOCS}")

    def substitute(line):
        line = line.replace("/tmp/", tmp + "/").replace("/var/lib/floe/", tmp + "/var-lib-floe/").replace("50051", port).replace("8000", http_port).replace("/path/to/trace.jsonl", TRACE)
        if model_dir:
            line = line.replace("/path/to/Llama-3.2-1B-Instruct", model_dir)
        words = shlex.split(line)
        if words[0].startswith("build/bin/"):
            words[0] = os.path.join(BUILD, "bin", words[0][len("build/bin/"):])
        elif words[0] == "helm":
            words[0] = os.path.join(ROOT, "third_party", "bin", "helm")
        return words

    # make-model lines first: they write the checkpoint the others serve.
    commands.sort(key=lambda c: " make-model " not in c[1])
    local = None
    ran = 0
    try:
        for doc, line in commands:
            words = substitute(line)
            if "/path/to/" in " ".join(words):
                fail(f"{doc}: a placeholder is left in: {line}")
                continue
            print(f"run: {doc}: {line}", flush=True)
            if words[1:2] == ["local"]:
                local = subprocess.Popen(words, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                deadline = time.time() + 300
                ready = False
                while time.time() < deadline:
                    out = local.stdout.readline()
                    if not out and local.poll() is not None:
                        break
                    if out.startswith("router listening on "):
                        ready = True
                        break
                if not ready:
                    fail(f"{doc}: `floe local` did not report 'router listening on': {line}")
                    return
                ran += 1
                continue
            result = subprocess.run(words, cwd=ROOT, capture_output=True, text=True, timeout=600)
            if result.returncode != 0:
                fail(f"{doc}: exit {result.returncode}: {line}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
                continue
            ran += 1
            if " make-model " in line:
                model_dir = words[words.index("--out") + 1]
                if not os.path.exists(os.path.join(model_dir, "config.json")):
                    fail(f"{doc}: make-model wrote no config.json in {model_dir}")
            elif words[1:2] == ["generate"] and not result.stdout.strip():
                fail(f"{doc}: floe generate printed nothing")
            elif words[1:2] == ["bench"]:
                summary = json.load(open(words[words.index("--json") + 1]))["summary"]
                want = int(words[words.index("--num-requests") + 1])
                if summary.get("completed") != want or summary.get("failed"):
                    fail(f"{doc}: floe bench completed {summary.get('completed')} of {want}, "
                         f"failed {summary.get('failed')}")
            elif words[0] == "curl":
                if '"stream": true' in line and not result.stdout.rstrip().endswith("data: [DONE]"):
                    fail(f"{doc}: the streamed curl did not end with data: [DONE]: {result.stdout[-500:]}")
                elif '"stream": true' not in line and '"error"' in result.stdout:
                    fail(f"{doc}: curl answered an error: {result.stdout[-500:]}")
            elif "floe-suffix-replay" in words[0]:
                replay = json.loads(result.stdout)
                if not replay:
                    fail(f"{doc}: floe-suffix-replay printed an empty JSON")
            elif words[1:2] == ["template"]:
                if "kind: StatefulSet" not in result.stdout:
                    fail(f"{doc}: helm template rendered no StatefulSet")
    finally:
        if local and local.poll() is None:
            local.send_signal(signal.SIGTERM)
            try:
                code = local.wait(timeout=60)
                if code != 0:
                    fail(f"floe local exited {code} on SIGTERM")
            except subprocess.TimeoutExpired:
                local.kill()
                fail("floe local did not stop within 60 s of SIGTERM")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{ran} passed, {len(errors)} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks the objects `helm template` rendered from deploy/helm/floe.

    check_rendered.py RENDERED.yaml [--expect KEY=VALUE ...]
        [--help-of worker=BIN --help-of router=BIN --help-of suffix-cache=BIN]

Invariants checked on every value set: the kinds are there; every container's
--port / --metrics-port equal its named ports, its Services' ports and its gRPC
probes (native grpc probes, all three); terminationGracePeriodSeconds exceeds
--drain-timeout-s plus the preStop sleep; workers get --model, /dev/shm in
memory, GPUs >= TP x SP; the router's config lists the worker pods' DNS names on
the worker port; PDB, Service and KEDA selectors hit a workload; the
PrometheusRule holds deploy/prometheus/floe-alerts.yaml; every flag passed
exists in the binary's --help (PENDING_FLAGS excepted, reported).
--expect pins facts of one value set (workers=N, gpu=N, tp=N, kinds=A,B, ...).
"""
import json
import os
import re
import subprocess
import sys

import yaml

# Flags the chart passes that a service may not have yet (landing in parallel).
# Reported, not failed, while a binary's --help lacks them.
PENDING_FLAGS = {
    "worker": {"--metrics-port", "--tensor-parallel-size", "--sequence-parallel-size"},
    "router": {"--metrics-port"},
    "suffix-cache": {"--metrics-port"},
}
ROOT = os.environ.get("FLOE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

errors = []


def fail(msg):
    errors.append(msg)


def args_of(container):
    out = {}
    for a in container.get("args", []) + container.get("command", [])[1:]:
        if a.startswith("--"):
            k, _, v = a.partition("=")
            out[k] = v
    return out


def component(obj):
    return obj["metadata"]["labels"].get("app.kubernetes.io/component")


def pod_labels(w):
    return w["spec"]["template"]["metadata"]["labels"]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def main(argv):
    path = argv[0]
    expect = {}
    helps = {}
    i = 1
    while i < len(argv):
        if argv[i] == "--expect":
            k, _, v = argv[i + 1].partition("=")
            expect[k] = v
        elif argv[i] == "--help-of":
            k, _, v = argv[i + 1].partition("=")
            helps[k] = v
        i += 2

    with open(path) as f:
        objs = [o for o in yaml.safe_load_all(f) if o]
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    kinds = set(by_kind)
    workloads = by_kind.get("Deployment", []) + by_kind.get("StatefulSet", [])
    services = by_kind.get("Service", [])
    configmaps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    statefulsets = {s["metadata"]["name"]: s for s in by_kind.get("StatefulSet", [])}

    for k in ("Deployment", "StatefulSet", "Service", "ConfigMap"):
        if k not in kinds:
            fail(f"no {k} rendered")
    for k in filter(None, expect.get("kinds", "").split(",")):
        if k not in kinds:
            fail(f"expected kind {k} not rendered (have {sorted(kinds)})")
    for k in filter(None, expect.get("no-kinds", "").split(",")):
        if k in kinds:
            fail(f"kind {k} rendered but not expected")

    workers = [w for w in workloads if component(w) == "worker"]
    routers = [w for w in workloads if component(w) == "router"]
    caches = [w for w in workloads if component(w) == "suffix-cache"]
    if "workers" in expect and len(workers) != int(expect["workers"]):
        fail(f"{len(workers)} worker StatefulSets, expected {expect['workers']}")
    if "routers" in expect and len(routers) != int(expect["routers"]):
        fail(f"{len(routers)} router Deployments, expected {expect['routers']}")
    if "suffix-caches" in expect and len(caches) != int(expect["suffix-caches"]):
        fail(f"{len(caches)} suffix-cache StatefulSets, expected {expect['suffix-caches']}")
    for w in workers + caches:
        if w["kind"] != "StatefulSet":
            fail(f"{w['metadata']['name']}: {component(w)} must be a StatefulSet")
    for w in routers:
        if w["kind"] != "Deployment":
            fail(f"{w['metadata']['name']}: router must be a Deployment")

    flags_used = {}
    for w in workloads:
        name = w["metadata"]["name"]
        comp = component(w)
        pod = w["spec"]["template"]["spec"]
        c = pod["containers"][0]
        a = args_of(c)
        flags_used.setdefault(comp, set()).update(a)
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        # Ports: the flags and the named container ports agree.
        if str(ports.get("grpc")) != a.get("--port"):
            fail(f"{name}: --port={a.get('--port')} but containerPort grpc={ports.get('grpc')}")
        if str(ports.get("metrics")) != a.get("--metrics-port"):
            fail(f"{name}: --metrics-port={a.get('--metrics-port')} but containerPort metrics={ports.get('metrics')}")
        if a.get("--host") != "0.0.0.0":
            fail(f"{name}: --host must be 0.0.0.0 in a pod (got {a.get('--host')})")
        # Probes: native gRPC health on the serving port, all three.
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = c.get(probe)
            if not p:
                fail(f"{name}: no {probe}")
                continue
            if set(p) & {"httpGet", "exec", "tcpSocket"} or "grpc" not in p:
                fail(f"{name}: {probe} is not a native grpc probe: {p}")
            elif p["grpc"].get("port") != ports.get("grpc"):
                fail(f"{name}: {probe} port {p['grpc'].get('port')} != grpc port {ports.get('grpc')}")
        # Drain: SIGTERM follows preStop; the grace period must cover both.
        drain = int(a.get("--drain-timeout-s", "-1"))
        if drain <= 0:
            fail(f"{name}: no --drain-timeout-s")
        pre = c.get("lifecycle", {}).get("preStop")
        if not pre:
            fail(f"{name}: no preStop hook")
        sleep = 0
        m = re.search(r"sleep (\d+)", " ".join(pre.get("exec", {}).get("command", []))) if pre else None
        if m:
            sleep = int(m.group(1))
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if not grace > drain + sleep:
            fail(f"{name}: terminationGracePeriodSeconds {grace} <= drain {drain} + preStop {sleep}")
        mounts = {vm["name"]: vm["mountPath"] for vm in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for vm in mounts:
            if vm not in volumes and vm not in claims:
                fail(f"{name}: volumeMount {vm} has no volume")
        # Services: some Service selects these pods and maps grpc/metrics to the same ports.
        svcs = [s for s in services if matches(s["spec"].get("selector", {}), pod_labels(w))]
        if not svcs:
            fail(f"{name}: no Service selects its pods")
        for s in svcs:
            for sp in s["spec"]["ports"]:
                if sp.get("targetPort") not in ports or sp["port"] != ports[sp["targetPort"]]:
                    fail(f"{name}: Service {s['metadata']['name']} port {sp} disagrees with container ports {ports}")

        if comp == "worker":
            model = a.get("--model", "")
            if not model:
                fail(f"{name}: worker args lack --model")
            if not any(model == mp or model.startswith(mp.rstrip("/") + "/") for mp in mounts.values()):
                fail(f"{name}: --model {model} lies under no volume mount {mounts}")
            shm = volumes.get(next((k for k, v in mounts.items() if v == "/dev/shm"), ""), {})
            if shm.get("emptyDir", {}).get("medium") != "Memory":
                fail(f"{name}: /dev/shm is not an emptyDir with medium Memory")
            res = c.get("resources", {})
            gpu_req = int(res.get("requests", {}).get("nvidia.com/gpu", 0))
            gpu_lim = int(res.get("limits", {}).get("nvidia.com/gpu", 0))
            if gpu_req != gpu_lim:
                fail(f"{name}: GPU request {gpu_req} != limit {gpu_lim}")
            tp = int(a.get("--tensor-parallel-size", 1))
            sp = int(a.get("--sequence-parallel-size", 1))
            if gpu_req and gpu_req < tp * sp:
                fail(f"{name}: {gpu_req} GPUs < TP {tp} x SP {sp}")
            if "gpu" in expect and gpu_req != int(expect["gpu"]):
                fail(f"{name}: {gpu_req} GPUs, expected {expect['gpu']}")
            if "tp" in expect and tp != int(expect["tp"]):
                fail(f"{name}: TP {tp}, expected {expect['tp']}")
            if gpu_req and not pod.get("tolerations"):
                fail(f"{name}: GPU pod without tolerations")
            if "node-selector" in expect:
                k, _, v = expect["node-selector"].partition(":")
                if pod.get("nodeSelector", {}).get(k) != v:
                    fail(f"{name}: nodeSelector {pod.get('nodeSelector')} lacks {k}={v}")
            svc = [s for s in svcs if s["metadata"]["name"] == w["spec"]["serviceName"]]
            if not svc or svc[0]["spec"].get("clusterIP") != "None":
                fail(f"{name}: serviceName {w['spec']['serviceName']} is not a rendered headless Service")

        if comp == "router":
            cfg_path = a.get("--config", "")
            cfg_dir = os.path.dirname(cfg_path)
            vol = next((volumes[k] for k, v in mounts.items() if v == cfg_dir and k in volumes), None)
            cm = configmaps.get((vol or {}).get("configMap", {}).get("name"))
            if not cm:
                fail(f"{name}: --config {cfg_path} is not mounted from a rendered ConfigMap")
                continue
            cfg = json.loads(cm["data"][os.path.basename(cfg_path)])
            check_worker_addresses(name, cfg.get("workers", []), a.get("--model-name"), statefulsets, services)
            tok = a.get("--tokenizer", "")
            if not any(tok.startswith(mp.rstrip("/") + "/") for mp in mounts.values()):
                fail(f"{name}: --tokenizer {tok} lies under no volume mount {mounts}")
            if "policy" in expect and a.get("--policy") != expect["policy"]:
                fail(f"{name}: --policy {a.get('--policy')}, expected {expect['policy']}")

        if comp == "suffix-cache":
            snap = a.get("--snapshot-dir", "")
            vm = next((k for k, v in mounts.items() if v == snap), None)
            if vm not in claims:
                fail(f"{name}: --snapshot-dir {snap} is not a volumeClaimTemplate mount (have {claims})")

    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = pdb["spec"]["selector"]["matchLabels"]
        if not any(matches(sel, pod_labels(w)) for w in workloads):
            fail(f"PDB {pdb['metadata']['name']} selects no workload")

    for so in by_kind.get("ScaledObject", []):
        target = so["spec"]["scaleTargetRef"]
        if target.get("kind") != "StatefulSet" or target.get("name") not in statefulsets:
            fail(f"ScaledObject {so['metadata']['name']}: target {target} is not a rendered StatefulSet")
        elif "replicas" in statefulsets[target["name"]]["spec"]:
            fail(f"StatefulSet {target['name']} sets replicas although KEDA scales it")
        for t in so["spec"]["triggers"]:
            if "floe_requests_waiting" not in t["metadata"].get("query", ""):
                fail(f"ScaledObject {so['metadata']['name']}: trigger does not query floe_requests_waiting")

    for pr in by_kind.get("PrometheusRule", []):
        with open(os.path.join(ROOT, "deploy", "prometheus", "floe-alerts.yaml")) as f:
            want = yaml.safe_load(f)["groups"]
        if pr["spec"].get("groups") != want:
            fail(f"PrometheusRule {pr['metadata']['name']}: groups differ from deploy/prometheus/floe-alerts.yaml")

    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"]["matchLabels"]
        hit = [s for s in services if matches(sel, s["metadata"]["labels"])]
        jobs = {s["metadata"]["labels"].get(sm["spec"].get("jobLabel", "")) for s in hit}
        want_jobs = {"floe-worker", "floe-router"} | ({"floe-suffix-cache"} if caches else set())
        if jobs != want_jobs:
            fail(f"ServiceMonitor selects jobs {jobs}, expected {want_jobs}")
        for s in hit:
            if "metrics" not in {p["name"] for p in s["spec"]["ports"]}:
                fail(f"Service {s['metadata']['name']}: scraped but has no metrics port")

    for comp, binary in helps.items():
        check_flags(comp, binary, flags_used.get(comp, set()))

    for e in errors:
        print("FAIL:", e)
    print(f"{path}: {len(objs)} objects {sorted(kinds)}, {len(errors)} problems")
    return 1 if errors else 0


def check_worker_addresses(router, addrs, model_name, statefulsets, services):
    if not addrs:
        fail(f"{router}: router config lists no workers")
    for addr in addrs:
        m = re.fullmatch(r"([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.[a-z0-9.-]+:(\d+)", addr)
        if not m:
            fail(f"{router}: worker address {addr!r} is not a StatefulSet pod DNS name")
            continue
        sts, ordinal, svc, _, port = m.groups()
        s = statefulsets.get(sts)
        if not s or s["spec"]["serviceName"] != svc:
            fail(f"{router}: {addr}: no StatefulSet {sts} governed by Service {svc}")
            continue
        c = s["spec"]["template"]["spec"]["containers"][0]
        a = args_of(c)
        if a.get("--port") != port:
            fail(f"{router}: {addr}: port {port} != worker --port {a.get('--port')}")
        if a.get("--model-name") != model_name:
            fail(f"{router}: routes model {model_name} to {sts} serving {a.get('--model-name')}")


def check_flags(comp, binary, used):
    try:
        text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    except OSError as e:
        fail(f"{comp}: cannot run {binary} --help: {e}")
        return
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", text, re.M))
    if not known:
        fail(f"{comp}: {binary} --help lists no flags")
        return
    for flag in sorted(used - known):
        if flag in PENDING_FLAGS.get(comp, set()):
            print(f"note: {comp}: {flag} not in {os.path.basename(binary)} --help yet (pending)")
        else:
            fail(f"{comp}: the chart passes {flag}, which {binary} --help does not list")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

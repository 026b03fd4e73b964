#!/usr/bin/env python3
"""Checks the objects `helm template` rendered from deploy/helm/floe.

    check_rendered.py RENDERED.yaml [--values FILE] [--expect KEY=VALUE ...]
        [--help-of worker=BIN --help-of router=BIN --help-of suffix-cache=BIN]

Invariants checked on every value set: the kinds are there; every container's
--port / --metrics-port equal its named ports, its Services' ports and its gRPC
probes (native grpc probes, all three); terminationGracePeriodSeconds exceeds
--drain-timeout-s plus the preStop sleep; workers get --model, /dev/shm in
memory, GPUs >= TP x SP; the router's config lists the worker pods' DNS names on
the worker port; PDB, Service and KEDA selectors hit a workload; the
PrometheusRule holds deploy/prometheus/floe-alerts.yaml; every flag passed
exists in the binary's --help (PENDING_FLAGS excepted, reported).
Multi-node workers (lws_checks.py): a LeaderWorkerSet's leader pod gets the
checks above; its groups' rank processes are started as the kubelet would
and checked (each rank once, the leader's store, GPUs per pod); the router,
the worker Service, the PDB, KEDA and the ServiceMonitor reach leaders only.
Each value's effect: the chart's values.yaml merged with --values (as Helm
merges them, each modelSpec entry over modelDefaults) gives every worker's
expected engine and speculation flags, compared with the rendered args; a
worker with suffix speculation lists exactly the suffix-cache pods on their
port when the suffix cache is enabled, and none otherwise. Internal trust
(security_checks.py): who the NetworkPolicies let reach which port, the
internal key's Secret, mount and flag on every service, and liveness probes
that restart a hung service but not a busy or loading one.
--expect pins facts of one value set (workers=N, gpu=N, tp=N, kinds=A,B, ...).
"""
import hashlib
import json
import os
import re
import subprocess
import sys

import yaml

from lws_checks import check_lws, pseudo_workload, worker_pods
from security_checks import check_internal_key, check_liveness, check_network_policies

# Flags the chart passes that a service may not have yet (landing in parallel).
# Reported, not failed, while a binary's --help lacks them.
PENDING_FLAGS = {}
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
    values_file = None
    i = 1
    while i < len(argv):
        if argv[i] == "--values":
            values_file = argv[i + 1] or None
        elif argv[i] == "--expect":
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
    lwss = {s["metadata"]["name"]: s for s in by_kind.get("LeaderWorkerSet", [])}
    # A LeaderWorkerSet's leader pod is checked as a workload's pod; its other
    # pods run ranks only (lws_checks.py).
    leaders = [pseudo_workload(s, "leader") for s in lwss.values()]
    followers = [pseudo_workload(s, "follower") for s in lwss.values()]
    workloads = by_kind.get("Deployment", []) + by_kind.get("StatefulSet", []) + leaders
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
        fail(f"{len(workers)} worker StatefulSets and LeaderWorkerSets, expected {expect['workers']}")
    if "lws" in expect and len(lwss) != int(expect["lws"]):
        fail(f"{len(lwss)} LeaderWorkerSets, expected {expect['lws']}")
    if "nodes" in expect and any(s["spec"]["leaderWorkerTemplate"].get("size") != int(expect["nodes"])
                                 for s in lwss.values()):
        fail(f"LeaderWorkerSet sizes {[s['spec']['leaderWorkerTemplate'].get('size') for s in lwss.values()]}, "
             f"expected {expect['nodes']}")
    if "routers" in expect and len(routers) != int(expect["routers"]):
        fail(f"{len(routers)} router Deployments, expected {expect['routers']}")
    if "suffix-caches" in expect and len(caches) != int(expect["suffix-caches"]):
        fail(f"{len(caches)} suffix-cache StatefulSets, expected {expect['suffix-caches']}")
    for w in workers + caches:
        if w["kind"] != "StatefulSet" and not (w in leaders and component(w) == "worker"):
            fail(f"{w['metadata']['name']}: {component(w)} must be a StatefulSet (or a worker LeaderWorkerSet)")
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
            if "--tls-cert" in a:
                # Under TLS kubelet cannot speak the protocol: the port is probed.
                if p.get("tcpSocket", {}).get("port") != ports.get("grpc"):
                    fail(f"{name}: {probe} under TLS must be tcpSocket on the grpc port: {p}")
            elif set(p) & {"httpGet", "exec", "tcpSocket"} or "grpc" not in p:
                fail(f"{name}: {probe} is not a native grpc probe: {p}")
            elif p["grpc"].get("port") != ports.get("grpc"):
                fail(f"{name}: {probe} port {p['grpc'].get('port')} != grpc port {ports.get('grpc')}")
        check_liveness(name, c, fail)
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
            for sp in s["spec"].get("ports", []):
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
            # A pod's ranks: all T x S, or a LeaderWorkerSet pod's share.
            here = tp * sp // (int(w["lws"]["spec"]["leaderWorkerTemplate"].get("size", 1)) if "lws" in w else 1)
            if gpu_req and gpu_req < here:
                fail(f"{name}: {gpu_req} GPUs < its {here} of TP {tp} x SP {sp} ranks")
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
            check_worker_addresses(name, cfg.get("workers", []), a.get("--model-name"), statefulsets, lwss, services)
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

    # Leader pods only: a worker pod of a LeaderWorkerSet serves no port, and
    # its group leaves and comes back with its leader.
    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = pdb["spec"]["selector"]["matchLabels"]
        if not any(matches(sel, pod_labels(w)) for w in workloads):
            fail(f"PDB {pdb['metadata']['name']} selects no workload")
        for f in followers:
            if matches(sel, pod_labels(f)):
                fail(f"PDB {pdb['metadata']['name']} selects {f['metadata']['name']}, not a leader pod")
    for s in services:
        if s["metadata"]["name"] in lwss:
            continue  # the set's own subdomain Service (lws_checks.py)
        for f in followers:
            if s["spec"].get("selector") and matches(s["spec"]["selector"], pod_labels(f)):
                fail(f"Service {s['metadata']['name']} selects {f['metadata']['name']}, a pod that only runs ranks")

    for so in by_kind.get("ScaledObject", []):
        target = so["spec"]["scaleTargetRef"]
        kinds_at = {("apps/v1", "StatefulSet"): statefulsets, ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): lwss}
        targets = kinds_at.get((target.get("apiVersion"), target.get("kind")), {})
        if target.get("name") not in targets:
            fail(f"ScaledObject {so['metadata']['name']}: target {target} is not a rendered StatefulSet "
                 f"or LeaderWorkerSet")
        elif "replicas" in targets[target["name"]]["spec"]:
            fail(f"{target['kind']} {target['name']} sets replicas although KEDA scales it")
        for t in so["spec"]["triggers"]:
            if "floe_num_requests_waiting" not in t["metadata"].get("query", ""):
                fail(f"ScaledObject {so['metadata']['name']}: trigger does not query floe_num_requests_waiting")

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
            if "metrics" not in {p["name"] for p in s["spec"].get("ports", [])}:
                fail(f"Service {s['metadata']['name']}: scraped but has no metrics port")
            if s["metadata"]["name"] in lwss:
                fail(f"Service {s['metadata']['name']}: the LeaderWorkerSet's own Service is scraped")

    for lws in lwss.values():
        flags_used.setdefault("worker", set()).update(check_lws(lws, services, args_of, fail))

    values = load_values(values_file)
    check_values(values, workers, caches, routers, configmaps)
    check_network_policies(values, by_kind, workloads, component, pod_labels, fail,
                           worker_pods(workloads, lwss.values(), by_kind.get("ScaledObject", []), component,
                                       pod_labels))
    check_internal_key(values, by_kind, workloads + followers, args_of, fail)

    for comp, binary in helps.items():
        check_flags(comp, binary, flags_used.get(comp, set()))

    for e in errors:
        print("FAIL:", e)
    print(f"{path}: {len(objs)} objects {sorted(kinds)}, {len(errors)} problems")
    return 1 if errors else 0


def check_worker_addresses(router, addrs, model_name, statefulsets, lwss, services):
    """Each address is a worker StatefulSet pod's DNS name, or a
    LeaderWorkerSet leader's (<lws>-<group>, under the set's Service)."""
    if not addrs:
        fail(f"{router}: router config lists no workers")
    for addr in addrs:
        m = re.fullmatch(r"([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.[a-z0-9.-]+:(\d+)", addr)
        if not m:
            fail(f"{router}: worker address {addr!r} is not a StatefulSet pod DNS name")
            continue
        sts, ordinal, svc, _, port = m.groups()
        s = statefulsets.get(sts)
        if sts in lwss:
            if svc != sts or svc not in {x["metadata"]["name"] for x in services}:
                fail(f"{router}: {addr}: a leader of LeaderWorkerSet {sts} lives under its Service {sts}, not {svc}")
                continue
            c = lwss[sts]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
        elif not s or s["spec"]["serviceName"] != svc:
            fail(f"{router}: {addr}: no StatefulSet {sts} governed by Service {svc}")
            continue
        else:
            c = s["spec"]["template"]["spec"]["containers"][0]
        a = args_of(c)
        if a.get("--port") != port:
            fail(f"{router}: {addr}: port {port} != worker --port {a.get('--port')}")
        if a.get("--model-name") != model_name:
            fail(f"{router}: routes model {model_name} to {sts} serving {a.get('--model-name')}")


def merge(base, over):
    """Helm's merge of values: maps merge key by key, anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v) if k in base else v
        return out
    return over


def load_values(values_file):
    with open(os.path.join(ROOT, "deploy", "helm", "floe", "values.yaml")) as f:
        values = yaml.safe_load(f)
    if values_file:
        with open(values_file) as f:
            values = merge(values, yaml.safe_load(f) or {})
    return values


def expected_worker_args(model, values):
    """The flags a worker of `model` (merged over modelDefaults) must get from its values."""
    spec = values["servingEngineSpec"]
    served = model.get("servedModelName") or model["name"]
    want = {
        "--model": model["modelPath"],
        "--model-name": served,
        "--load-format": model["loadFormat"],
        "--weight-cache": "/var/cache/floe" if model["weightCache"]["enabled"] else "off",
        "--port": str(spec["port"]),
        "--metrics-port": str(spec["metricsPort"]),
        "--threads": str(int(model["threads"])),
        "--kv-cache-gb": str(model["kvCacheGB"]),
        "--kv-cache-dtype": model["kvCacheDtype"],
        "--max-model-len": str(int(model["maxModelLen"])),
        "--block-size": str(int(model["blockSize"])),
        "--max-num-seqs": str(int(model["maxNumSeqs"])),
        "--max-waiting": str(int(model["maxWaiting"])),
        "--drain-timeout-s": str(spec["drainTimeoutSeconds"]),
        "--tensor-parallel-size": str(model["tensorParallelSize"]) if model["tensorParallelSize"] > 1 else None,
        "--sequence-parallel-size": str(model["sequenceParallelSize"]) if model["sequenceParallelSize"] > 1 else None,
        "--parallel-mode": model["parallelMode"] or None,
        "--shift-threshold": str(model["shiftThreshold"]) if model["shiftThreshold"] > 0 else None,
        "--shift-profile": SHIFT_PROFILE_PATH if model["shiftProfile"] else None,
        # Rank 0 of a multi-node worker waits for its ranks and listens on its pod's IP.
        "--rank-launch": "remote" if model["nodesPerWorker"] > 1 else None,
        "--rank-host": "$(POD_IP)" if model["nodesPerWorker"] > 1 else None,
    }
    sp = model["speculation"]
    want["--speculative"] = sp["method"]
    want["--num-speculative-tokens"] = str(sp["numSpeculativeTokens"]) if sp["method"] != "off" else None
    suffix = sp["method"] == "suffix"
    want["--speculative-default-namespace"] = (sp["defaultNamespace"] or served) if suffix else None
    want["--speculative-tree"] = "" if suffix and sp["tree"] else None
    want["--speculative-reference-compatible"] = "" if suffix and sp["referenceCompatible"] else None
    return want


def check_values(values, workers, caches, routers, configmaps):
    spec = values["servingEngineSpec"]
    by_model = {pod_labels(w).get("floe.ai/model"): w for w in workers}
    cache_cfg = values["suffixCacheSpec"]
    for entry in spec["modelSpec"]:
        model = merge(spec["modelDefaults"], entry)
        w = by_model.get(model["name"])
        if not w:
            fail(f"model {model['name']}: no worker StatefulSet rendered")
            continue
        name = w["metadata"]["name"]
        pod = w["spec"]["template"]["spec"]
        args = args_of(pod["containers"][0])
        for flag, value in expected_worker_args(model, values).items():
            if value is None and flag in args:
                fail(f"{name}: {flag}={args[flag]} rendered, but its values turn it off")
            elif value is not None and args.get(flag) != value:
                fail(f"{name}: {flag}={args.get(flag)!r}, its values give {value!r}")
        nodes = model["nodesPerWorker"]
        if (w["kind"] == "LeaderWorkerSet") != (nodes > 1):
            fail(f"{name}: a {w['kind']} for nodesPerWorker {nodes}")
        elif nodes > 1:
            size = w["lws"]["spec"]["leaderWorkerTemplate"].get("size")
            if size != nodes:
                fail(f"{name}: size {size}, its values give nodesPerWorker {nodes}")
            ranks = model["tensorParallelSize"] * model["sequenceParallelSize"]
            gpus = int(pod["containers"][0].get("resources", {}).get("limits", {}).get(model["gpuResourceName"], 0))
            if gpus != (ranks // nodes if model["requestGPU"] > 0 else 0):
                fail(f"{name}: {gpus} GPUs per pod; its values give {ranks} ranks / {nodes} pods"
                     f"{'' if model['requestGPU'] > 0 else ' on CPUs (requestGPU 0)'}")
        check_weight_cache_bound(name, model, args)
        check_shift_profile(name, model, w["spec"]["template"], configmaps)
        # The global tree: every suffix-cache pod, on the suffix cache's port.
        suffix = model["speculation"]["method"] == "suffix"
        if suffix and cache_cfg["enabled"]:
            if len(caches) != 1:
                fail(f"{name}: suffix speculation with {len(caches)} suffix-cache StatefulSets rendered")
                continue
            sts = caches[0]
            port = args_of(sts["spec"]["template"]["spec"]["containers"][0]).get("--port")
            want = [f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}.serving.svc."
                    f"{values['clusterDomain']}:{port}" for i in range(int(sts["spec"]["replicas"]))]
            if int(sts["spec"]["replicas"]) != int(cache_cfg["replicaCount"]):
                fail(f"{sts['metadata']['name']}: {sts['spec']['replicas']} replicas, values give {cache_cfg['replicaCount']}")
            if args.get("--suffix-cache", "").split(",") != want:
                fail(f"{name}: --suffix-cache={args.get('--suffix-cache')!r}, expected the suffix-cache pods {want}")
        elif "--suffix-cache" in args:
            fail(f"{name}: --suffix-cache rendered without suffix speculation on an enabled suffix cache")
    # The router's config holds what the router reads, nothing else.
    for cm in configmaps.values():
        if "router.json" in cm.get("data", {}):
            keys = set(json.loads(cm["data"]["router.json"]))
            if keys != {"workers"}:
                fail(f"ConfigMap {cm['metadata']['name']}: router.json has keys {sorted(keys)}; "
                     f"floe-router --config reads only workers")


# Where the chart mounts shiftProfile's ConfigMap (_helpers.tpl floe.shiftProfilePath).
SHIFT_PROFILE_PATH = "/etc/floe-shift-profile/shift-profile.json"
QUANTITY_UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
                  "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}


def check_weight_cache_bound(name, model, args):
    """--weight-cache-max-gb (GiB) below weightCache.sizeLimit, by the chart's
    10% margin (the kubelet evicts a pod whose emptyDir passes its limit)."""
    wc = model["weightCache"]
    flag = args.get("--weight-cache-max-gb")
    if not (wc["enabled"] and wc["sizeLimit"]):
        if flag is not None:
            fail(f"{name}: --weight-cache-max-gb={flag} without a weight cache sizeLimit")
        return
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", wc["sizeLimit"])
    limit_gib = float(m.group(1)) * QUANTITY_UNITS[m.group(2)] / 2 ** 30
    if flag is None:
        fail(f"{name}: weightCache.sizeLimit {wc['sizeLimit']} but no --weight-cache-max-gb")
    elif not re.fullmatch(r"[0-9]+(\.[0-9]{1,2})?", flag):
        fail(f"{name}: --weight-cache-max-gb={flag} is not a number with at most 2 decimals")
    elif not 0.9 * limit_gib - 0.01 - 1e-9 <= float(flag) <= 0.9 * limit_gib + 1e-9:
        fail(f"{name}: --weight-cache-max-gb={flag}, expected 90% of sizeLimit {wc['sizeLimit']} = "
             f"{0.9 * limit_gib:.4f} GiB (rounded down)")


def check_shift_profile(name, model, template, configmaps):
    """shiftProfile: the ConfigMap mounted at --shift-profile holds it, and a
    changed profile rolls the pods (the worker reads it at start)."""
    profile = model["shiftProfile"]
    pod = template["spec"]
    c = pod["containers"][0]
    mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"] == os.path.dirname(SHIFT_PROFILE_PATH)), None)
    if not profile:
        if mount:
            fail(f"{name}: a shift profile mounted although shiftProfile is empty")
        return
    vol = next((v for v in pod.get("volumes", []) if mount and v["name"] == mount["name"]), {})
    cm = configmaps.get(vol.get("configMap", {}).get("name"))
    if not cm:
        fail(f"{name}: --shift-profile {SHIFT_PROFILE_PATH} is not mounted from a rendered ConfigMap")
        return
    got = json.loads(cm["data"].get(os.path.basename(SHIFT_PROFILE_PATH), "null"))
    want = json.loads(profile) if isinstance(profile, str) else profile
    if got != want:
        fail(f"ConfigMap {cm['metadata']['name']}: the profile {got} is not shiftProfile {want}")
    text = cm["data"][os.path.basename(SHIFT_PROFILE_PATH)]
    annotation = (template["metadata"].get("annotations") or {}).get("checksum/shift-profile")
    if annotation != hashlib.sha256(text.encode()).hexdigest():
        fail(f"{name}: checksum/shift-profile {annotation} is not the profile's: a new profile would not roll it")


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

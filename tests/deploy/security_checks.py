"""Checks of the chart's internal trust: NetworkPolicies and the internal key.

Used by check_rendered.py on every rendering. NetworkPolicies are evaluated
the way a CNI enforces them (a pod selected by an Ingress policy accepts only
what some rule of such a policy allows; a rule's peers and ports are ORs, a
peer's podSelector and namespaceSelector an AND), over the rendered pods plus
synthetic ones: a stranger in the release namespace, one in another
namespace, and the monitoring pods the values describe. Then: who may reach
which port of each worker, suffix cache and router. Rank traffic (rank 0's
store on the worker port, Gloo/NCCL on any port) flows only inside a rank
group: the pods of one LeaderWorkerSet group; a StatefulSet worker pod is a
group of its own (its ranks talk inside it, where no policy applies).
"""
import base64
import hashlib
import os
import re

RELEASE_NS = "serving"  # helm_chart_test.sh renders with -n serving
# A port Gloo or NCCL might pick for a rank's collectives.
RANK_PORT = 29500


class Pod:
    def __init__(self, name, namespace, labels, ns_labels=None, ports=None):
        self.name = name
        self.namespace = namespace
        self.labels = labels
        self.ports = ports or {}  # container port names, for policies that name ports
        self.ns_labels = dict(ns_labels or {}, **{"kubernetes.io/metadata.name": namespace})

    def __repr__(self):
        return self.name


def selects(selector, labels):
    """A LabelSelector (matchLabels and matchExpressions) against labels; {} selects all."""
    if selector is None:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def peer_admits(peer, src, policy_ns):
    if "ipBlock" in peer:
        return False  # pods are reached by selectors here, never by address
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], src.ns_labels):
            return False
    elif src.namespace != policy_ns:
        return False  # a podSelector alone means the policy's namespace
    return selects(peer.get("podSelector"), src.labels)


def port_admits(p, dst, port):
    if p.get("protocol", "TCP") != "TCP":
        return False
    first = dst.ports.get(p["port"], -1) if isinstance(p.get("port"), str) else p.get("port")
    return first is None or first == port or p.get("endPort", -1) >= port >= first


def rule_admits(rule, src, dst, port):
    ports = rule.get("ports")
    if ports and not any(port_admits(p, dst, port) for p in ports):
        return False
    peers = rule.get("from")
    return not peers or any(peer_admits(peer, src, dst.namespace) for peer in peers)


def allowed(policies, src, dst, port):
    """Whether src may open a TCP connection to dst:port under these policies."""
    isolating = [p for p in policies
                 if "Ingress" in p["spec"].get("policyTypes", ["Ingress"]) and
                 p.get("metadata", {}).get("namespace", RELEASE_NS) == dst.namespace and
                 selects(p["spec"]["podSelector"], dst.labels)]
    if not isolating:
        return True
    return any(rule_admits(r, src, dst, port)
               for p in isolating for r in p["spec"].get("ingress") or [])


def pod_admitted_by(peer, name):
    """A synthetic pod that `peer` admits (matchLabels and In/Exists expressions)."""
    def labels_for(sel):
        out = dict((sel or {}).get("matchLabels") or {})
        for e in (sel or {}).get("matchExpressions") or []:
            if e["operator"] == "In":
                out[e["key"]] = e["values"][0]
            elif e["operator"] == "Exists":
                out[e["key"]] = "x"
        return out
    if "namespaceSelector" in peer:
        ns_labels = labels_for(peer["namespaceSelector"])
        ns = ns_labels.get("kubernetes.io/metadata.name", name + "-ns")
        return Pod(name, ns, labels_for(peer.get("podSelector")), ns_labels)
    return Pod(name, RELEASE_NS, labels_for(peer.get("podSelector")))


def check_network_policies(values, by_kind, workloads, component, pod_labels, fail, rank_pods=()):
    """rank_pods: (pod name, labels, rank group) of every worker pod to
    evaluate rank traffic between (lws_checks.worker_pods); a group None is
    another group than all the others, and its own traffic is not asserted."""
    policies = by_kind.get("NetworkPolicy", [])
    np = values.get("networkPolicy", {})
    if not np.get("enabled"):
        if policies:
            fail(f"networkPolicy.enabled is false but {len(policies)} NetworkPolicies rendered")
        return
    if not policies:
        fail("networkPolicy.enabled but no NetworkPolicy rendered")
        return
    for p in policies:
        if p["spec"].get("policyTypes") != ["Ingress"]:
            fail(f"NetworkPolicy {p['metadata']['name']}: policyTypes {p['spec'].get('policyTypes')}, "
                 f"expected [Ingress] (egress is left open)")
        if not any(selects(p["spec"]["podSelector"], labels)
                   for labels in [pod_labels(w) for w in workloads] + [labels for _, labels, _ in rank_pods]):
            fail(f"NetworkPolicy {p['metadata']['name']} selects no workload's pods")

    def ports_of(w):
        c = w["spec"]["template"]["spec"]["containers"][0]
        return {p["name"]: p["containerPort"] for p in c.get("ports", [])}

    pods = {w["metadata"]["name"]: Pod(w["metadata"]["name"], RELEASE_NS, pod_labels(w), ports=ports_of(w))
            for w in workloads}
    mon_peer = {"namespaceSelector": np.get("monitoringNamespaceSelector") or
                {"matchLabels": {"kubernetes.io/metadata.name": np["monitoringNamespace"]}}}
    if np.get("monitoringPodSelector"):
        mon_peer["podSelector"] = np["monitoringPodSelector"]
    monitoring = pod_admitted_by(mon_peer, "prometheus")
    strangers = [Pod("stranger-same-namespace", RELEASE_NS, {"app": "curl"}),
                 Pod("stranger-other-namespace", "default", {"app": "curl"})]
    # Labels are no identity across namespaces: a pod elsewhere wearing the
    # release's labels is a stranger too (inside the namespace, the internal key
    # tells them apart).
    strangers += [Pod(f"{n}-lookalike-in-default", "default", p.labels) for n, p in pods.items()]
    if np.get("monitoringPodSelector"):
        strangers.append(Pod("monitoring-namespace-non-prometheus", monitoring.namespace,
                             {"app": "curl"}, monitoring.ns_labels))
    unselected = Pod("prometheus-in-" + np.get("monitoringNamespace", ""), np.get("monitoringNamespace", ""),
                     monitoring.labels)
    if not peer_admits(mon_peer, unselected, RELEASE_NS):
        strangers.append(unselected)  # monitoringNamespaceSelector replaced monitoringNamespace
    workers = [w for w in workloads if component(w) == "worker"]
    routers = [w for w in workloads if component(w) == "router"]
    caches = [w for w in workloads if component(w) == "suffix-cache"]
    model = lambda w: pod_labels(w).get("floe.ai/model")

    def expect(src, dst_w, port, want, what):
        dst = pods[dst_w["metadata"]["name"]]
        if allowed(policies, src, dst, port) != want:
            fail(f"NetworkPolicy: {src} -> {dst}:{port} ({what}) is "
                 f"{'denied' if want else 'allowed'}, expected {'allowed' if want else 'denied'}")

    for w in workloads:
        if not any(selects(p["spec"]["podSelector"], pod_labels(w)) for p in policies):
            fail(f"{w['metadata']['name']}: no NetworkPolicy selects its pods (it accepts anyone)")
        metrics = ports_of(w)["metrics"]
        expect(monitoring, w, metrics, True, "metrics from the monitoring namespace")
        for s in strangers:
            expect(s, w, metrics, False, "metrics from outside the monitoring namespace")
        for other in workloads:
            if component(other) != component(w) or model(other) != model(w):
                expect(pods[other["metadata"]["name"]], w, metrics, False, "metrics from another service")

    for w in workers:
        grpc = ports_of(w)["grpc"]
        for r in routers:
            same = model(r) == model(w)
            expect(pods[r["metadata"]["name"]], w, grpc, same,
                   "worker gRPC from its model's router" if same else "worker gRPC from another model's router")
            expect(pods[r["metadata"]["name"]], w, RANK_PORT, False, "a router on a rank port")
        for c in caches:
            expect(pods[c["metadata"]["name"]], w, grpc, False, "worker gRPC from the suffix cache")
        for s in strangers + [monitoring]:
            expect(s, w, grpc, False, "worker gRPC from a pod outside the release")

    # Rank traffic: inside a group only, from no one else.
    worker_port = values["servingEngineSpec"]["port"]
    ranks = [(Pod(n, RELEASE_NS, labels), group) for n, labels, group in rank_pods]
    for dst, dst_group in ranks:
        if not any(selects(p["spec"]["podSelector"], dst.labels) for p in policies):
            fail(f"{dst}: no NetworkPolicy selects this worker pod (it accepts anyone)")
        for src, src_group in ranks:
            if src is dst or src_group is dst_group is None:
                continue  # a pod's own traffic never meets a policy; None: not asserted
            for port, what in ((worker_port, "rank store"), (RANK_PORT, "Gloo/NCCL")):
                same = src_group == dst_group
                if allowed(policies, src, dst, port) != same:
                    fail(f"NetworkPolicy: {src} -> {dst}:{port} ({what}) is "
                         f"{'denied' if same else 'allowed'}, expected {'allowed' if same else 'denied'}: "
                         f"{'the same' if same else 'another'} rank group")
        for src in strangers + [monitoring] + [pods[r["metadata"]["name"]] for r in routers + caches]:
            if allowed(policies, src, dst, RANK_PORT):
                fail(f"NetworkPolicy: {src} -> {dst}:{RANK_PORT} (Gloo/NCCL) is allowed, expected denied")

    for c in caches:
        grpc = ports_of(c)["grpc"]
        for w in workers:
            expect(pods[w["metadata"]["name"]], c, grpc, True, "suffix-cache gRPC from a worker")
        for r in routers:
            expect(pods[r["metadata"]["name"]], c, grpc, False, "suffix-cache gRPC from a router")
        for s in strangers + [monitoring]:
            expect(s, c, grpc, False, "suffix-cache gRPC from a pod outside the release")

    ingress_from = np.get("routerIngressFrom") or []
    for r in routers:
        ports = ports_of(r)
        api = [ports["grpc"]] + ([ports["http"]] if "http" in ports else [])
        for port in api:
            if ingress_from:
                for i, peer in enumerate(ingress_from):
                    if "ipBlock" not in peer:
                        expect(pod_admitted_by(peer, f"routerIngressFrom[{i}]"), r, port, True,
                               "the router API from a routerIngressFrom peer")
                for s in strangers:
                    expect(s, r, port, False, "the router API from a peer not in routerIngressFrom")
            else:
                for s in strangers + [monitoring]:
                    expect(s, r, port, True, "the router's public API from anywhere")
        for s in strangers:
            expect(s, r, RANK_PORT, False, "a router port that serves nothing")


def check_internal_key(values, by_kind, workloads, args_of, fail):
    ik = values.get("internalKey", {})
    secrets = [s for s in by_kind.get("Secret", [])
               if s["metadata"]["labels"].get("app.kubernetes.io/component") == "internal-key"]
    if not ik.get("enabled"):
        if secrets:
            fail("internalKey.enabled is false but an internal-key Secret is rendered")
        for w in workloads:
            if "--internal-key-file" in args_of(w["spec"]["template"]["spec"]["containers"][0]):
                fail(f"{w['metadata']['name']}: --internal-key-file with internalKey.enabled false")
        return
    existing = ik.get("existingSecret") or ""
    if existing and secrets:
        fail(f"internalKey.existingSecret={existing} but the chart renders its own Secret too")
    if not existing and len(secrets) != 1:
        fail(f"{len(secrets)} internal-key Secrets rendered, expected 1")
        return
    secret = secrets[0] if secrets else None
    if secret:
        data = secret.get("data", {}).get("key", "")
        key = base64.b64decode(data).decode()
        if not re.fullmatch(r"[A-Za-z0-9]{32,}", key):
            fail(f"Secret {secret['metadata']['name']}: the generated key is not 32+ alphanumerics: {len(key)} chars")
    for w in workloads:
        name = w["metadata"]["name"]
        pod = w["spec"]["template"]["spec"]
        c = pod["containers"][0]
        path = args_of(c).get("--internal-key-file", "")
        if not path:
            fail(f"{name}: no --internal-key-file although internalKey.enabled")
            continue
        mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"] == os.path.dirname(path)), None)
        if not mount or not mount.get("readOnly"):
            fail(f"{name}: --internal-key-file {path}: its folder is not a read-only mount ({mount})")
            continue
        vol = next((v for v in pod.get("volumes", []) if v["name"] == mount["name"]), {})
        sec = vol.get("secret", {})
        want_name = existing or (secret["metadata"]["name"] if secret else "")
        want_key = ik.get("existingSecretKey", "key") if existing else "key"
        if sec.get("secretName") != want_name:
            fail(f"{name}: internal key mounted from Secret {sec.get('secretName')}, expected {want_name}")
        if {"key": want_key, "path": os.path.basename(path)} not in sec.get("items", []):
            fail(f"{name}: Secret item {want_key} is not the file {os.path.basename(path)}: {sec.get('items')}")
        annotation = (w["spec"]["template"]["metadata"].get("annotations") or {}).get("checksum/internal-key")
        if secret and annotation != hashlib.sha256(data.encode()).hexdigest():
            fail(f"{name}: checksum/internal-key {annotation} is not the rendered key's: a new key would not roll it")
        if existing and annotation:
            fail(f"{name}: checksum/internal-key with an existing Secret (the chart cannot know its content)")


def check_liveness(name, container, fail):
    """A liveness probe restarts a hung service, but not one that is merely busy
    or still loading (the startup probe holds liveness off until it serves)."""
    live = container.get("livenessProbe") or {}
    start = container.get("startupProbe") or {}
    period, threshold = live.get("periodSeconds", 10), live.get("failureThreshold", 3)
    if live.get("timeoutSeconds", 1) >= period:
        fail(f"{name}: livenessProbe timeoutSeconds {live.get('timeoutSeconds')} >= periodSeconds {period}")
    if threshold < 2 or period * threshold < 30:
        fail(f"{name}: livenessProbe restarts after {threshold} x {period}s: under 30 s or on a single miss")
    if not start:
        fail(f"{name}: livenessProbe without a startupProbe would kill a loading service")

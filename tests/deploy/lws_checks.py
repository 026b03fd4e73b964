"""Checks of the chart's multi-node workers (LeaderWorkerSet, nodesPerWorker > 1).

Used by check_rendered.py on every rendering. A LeaderWorkerSet's pods are
not rendered, so they are made here the way the LWS controller and its pod
webhook make them (sigs.k8s.io/lws: pkg/webhooks/pod_webhook.go,
pkg/utils/pod/pod_utils.go): the template's labels plus the set's name,
group-index and worker-index, and the env LWS_LEADER_ADDRESS
(<lws>-<group>.<lws>.<namespace>), LWS_GROUP_SIZE and LWS_WORKER_INDEX. Each
pod's container is then started as the kubelet would (its $(VAR) references
expanded from its env) with a recorder in place of floe-worker, so the
rank processes checked are the ones the rendered command line really starts:
each rank of T x S exactly once across a group, each at the leader's store
(LWS_LEADER_ADDRESS on rank 0's port) with its pod's IP, GPUs per pod = its
ranks (adding up to T x S), one GPU each.
"""
import os
import subprocess
import tempfile

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
NAMESPACE = "serving"  # helm_chart_test.sh renders with -n serving
# The image's entrypoint (deploy/docker/worker.Dockerfile): a launcher runs it as $0.
WORKER_BIN = "/usr/local/bin/floe-worker"
# Flags that differ between the rank processes of one worker by design.
RANK_FLAGS = {"--rank", "--rank-store", "--rank-host", "--rank-launch"}
# A launcher that starts fewer processes than its pod's ranks leaves the
# recorders waiting for the others: this long, then the count is reported.
BARRIER_S = 30

# Records its argv (one file per process, complete or absent), then waits
# until all REC_EXPECT processes of the pod have recorded theirs (bounded),
# so that a launcher that ends its pod when one process exits sees none exit
# before every process has started.
RECORDER = """#!/bin/sh
printf '%s\\n' "$@" > "$REC_DIR/.$$.tmp" && mv "$REC_DIR/.$$.tmp" "$REC_DIR/$$.args"
i=0
while [ "$(ls "$REC_DIR" | wc -l)" -lt "$REC_EXPECT" ] && [ "$i" -lt "$REC_LIMIT" ]; do
  sleep 0.1; i=$((i + 1))
done
"""


def flags(argv):
    out = {}
    for a in argv:
        if a.startswith("--"):
            k, _, v = a.partition("=")
            out[k] = v
    return out


def k8s_expand(s, env):
    """$(VAR) references as the kubelet expands command and args: a defined
    variable's value, $$ an escaped $, anything else left as written."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "$" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                j = s.find(")", i + 2)
                if j != -1:
                    name = s[i + 2:j]
                    out.append(env[name] if name in env else s[i:j + 1])
                    i = j + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(s[i])
        i += 1
    return "".join(out)


def pod_labels(lws, group, index):
    t = lws["spec"]["leaderWorkerTemplate"]
    tmpl = t.get("leaderTemplate") if index == 0 else t["workerTemplate"]
    labels = dict((tmpl or t["workerTemplate"])["metadata"].get("labels") or {})
    labels.update({LWS_NAME: lws["metadata"]["name"], LWS_GROUP_INDEX: str(group),
                   LWS_WORKER_INDEX: str(index)})
    return labels


def pseudo_workload(lws, role):
    """Group 0's leader (role "leader") or first worker pod ("follower") as a
    workload dict (spec.template, serviceName) for the checks all pods get."""
    t = lws["spec"]["leaderWorkerTemplate"]
    index = 0 if role == "leader" else 1
    tmpl = t.get("leaderTemplate") if role == "leader" else t["workerTemplate"]
    tmpl = tmpl or t["workerTemplate"]
    name = lws["metadata"]["name"]
    return {
        "kind": "LeaderWorkerSet", "lws": lws, "role": role,
        "metadata": {"name": f"{name}-0" if index == 0 else f"{name}-0-{index}",
                     "labels": lws["metadata"].get("labels", {})},
        "spec": {"template": {"metadata": dict(tmpl["metadata"], labels=pod_labels(lws, 0, index)),
                              "spec": tmpl["spec"]},
                 "serviceName": name, "replicas": lws["spec"].get("replicas"),
                 "volumeClaimTemplates": t.get("volumeClaimTemplates", [])},
    }


def group_size(lws):
    return int(lws["spec"]["leaderWorkerTemplate"].get("size", 1))


def pod_env(container, lws, group, index, pod_ip):
    name = lws["metadata"]["name"]
    env = {"LWS_LEADER_ADDRESS": f"{name}-{group}.{name}.{NAMESPACE}",
           "LWS_GROUP_SIZE": str(group_size(lws)), "LWS_WORKER_INDEX": str(index)}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = k8s_expand(str(e["value"]), env)
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[e["name"]] = pod_ip
        else:
            env[e["name"]] = f"<{e['name']}>"
    return env


def launch(container, env, expect, fail, where):
    """(argv, is the container's first process) of every process the
    container starts, run as the kubelet would with a recorder in place of
    floe-worker."""
    command = [k8s_expand(c, env) for c in container.get("command", [])]
    args = [k8s_expand(a, env) for a in container.get("args", [])]
    if not command:
        return [(args, True)]  # the image's entrypoint, floe-worker, with the args
    if len(command) != 4 or command[0] != "/bin/bash" or command[1] != "-c" or command[3] != WORKER_BIN:
        fail(f"{where}: command {command[:2]}... is not [/bin/bash, -c, SCRIPT, {WORKER_BIN}]")
        return []
    with tempfile.TemporaryDirectory() as tmp:
        rec_dir = os.path.join(tmp, "records")
        os.mkdir(rec_dir)
        recorder = os.path.join(tmp, "floe-worker")
        with open(recorder, "w") as f:
            f.write(RECORDER)
        os.chmod(recorder, 0o755)
        run_env = dict(env, PATH="/usr/bin:/bin", REC_DIR=rec_dir, REC_EXPECT=str(expect),
                       REC_LIMIT=str(BARRIER_S * 10))
        with subprocess.Popen([command[0], command[1], command[2], recorder] + args, env=run_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as launcher:
            try:
                _, err = launcher.communicate(timeout=BARRIER_S + 30)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.communicate()
                fail(f"{where}: the launcher did not end within {BARRIER_S + 30} s")
                return []
        if launcher.returncode != 0:
            fail(f"{where}: the launcher exited {launcher.returncode}: {err.strip()[-500:]}")
        procs = []
        for rec in sorted(os.listdir(rec_dir)):
            with open(os.path.join(rec_dir, rec)) as f:
                procs.append((f.read().splitlines(), rec == f"{launcher.pid}.args"))
        return procs


def check_lws(lws, services, args_of, fail):
    """One LeaderWorkerSet: its restart and startup policies, its headless
    Service, its worker pods' template and two groups' rank processes.
    Returns every flag its processes pass (for --help)."""
    name = lws["metadata"]["name"]
    spec = lws["spec"]
    t = spec["leaderWorkerTemplate"]
    used = set()
    if t.get("restartPolicy") != "RecreateGroupOnPodRestart":
        fail(f"LeaderWorkerSet {name}: restartPolicy {t.get('restartPolicy')}, expected RecreateGroupOnPodRestart "
             f"(a lost rank fails its worker; the group must come back whole)")
    if spec.get("startupPolicy", "LeaderCreated") != "LeaderCreated":
        fail(f"LeaderWorkerSet {name}: startupPolicy {spec.get('startupPolicy')}: the leader is ready only once "
             f"every rank joined it, so its workers must start with it (LeaderCreated)")
    if not t.get("leaderTemplate"):
        fail(f"LeaderWorkerSet {name}: no leaderTemplate (rank 0's pod differs from the others)")
        return used
    size = group_size(lws)
    leader = t["leaderTemplate"]["spec"]["containers"][0]
    la = args_of(leader)
    ranks = int(la.get("--tensor-parallel-size", 1)) * int(la.get("--sequence-parallel-size", 1))
    port = la.get("--port")
    if size < 2 or ranks % size:
        fail(f"LeaderWorkerSet {name}: size {size} does not split {ranks} ranks evenly over 2 or more pods")
        return used
    per_pod = ranks // size

    # The group's DNS subdomain: LWS_LEADER_ADDRESS must resolve before the
    # leader is ready (the ranks meet there first).
    svc = next((s for s in services if s["metadata"]["name"] == name), None)
    if not svc:
        fail(f"LeaderWorkerSet {name}: no headless Service {name} (its pods' subdomain) rendered")
    else:
        if svc["spec"].get("clusterIP") != "None" or not svc["spec"].get("publishNotReadyAddresses"):
            fail(f"Service {name}: must be headless and publish not-ready addresses (ranks meet the leader first)")
        if svc["spec"].get("selector") != {LWS_NAME: name}:
            fail(f"Service {name}: selector {svc['spec'].get('selector')}, "
                 f"expected the set's pods {{{LWS_NAME}: {name}}}")
        if svc["metadata"]["labels"].get("floe.ai/metrics"):
            fail(f"Service {name}: scraped (floe.ai/metrics) although worker pods serve no /metrics")

    follower_tmpl = t["workerTemplate"]["spec"]
    follower = follower_tmpl["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe in follower:
            fail(f"LeaderWorkerSet {name}: worker pods have a {probe}, but their ranks serve no port")
    follower_grace = follower_tmpl.get("terminationGracePeriodSeconds", 30)
    leader_grace = t["leaderTemplate"]["spec"].get("terminationGracePeriodSeconds", 30)
    if follower_grace < leader_grace:
        fail(f"LeaderWorkerSet {name}: worker pods' grace period {follower_grace} < the leader's {leader_grace}: "
             f"their ranks must outlive rank 0's drain")

    for group in (0, 1):  # two groups: nothing may hold group 0's names
        leader_address = f"{name}-{group}.{name}.{NAMESPACE}"
        seen = {}
        gpu_total = 0
        for index in range(size):
            where = f"LeaderWorkerSet {name} group {group} pod {index}"
            tmpl = t["leaderTemplate"] if index == 0 else t["workerTemplate"]
            c = tmpl["spec"]["containers"][0]
            pod_ip = f"198.18.{group}.{index + 1}"
            res = c.get("resources", {})
            gpus = int(res.get("limits", {}).get("nvidia.com/gpu", 0))
            if gpus != int(res.get("requests", {}).get("nvidia.com/gpu", 0)):
                fail(f"{where}: GPU request != limit")
            gpu_total += gpus
            procs = launch(c, pod_env(c, lws, group, index, pod_ip), per_pod, fail, where)
            if len(procs) != per_pod:
                fail(f"{where}: starts {len(procs)} rank processes, expected {ranks} ranks / {size} pods = {per_pod}")
            local = []
            for argv, first_process in procs:
                a = flags(argv)
                used.update(a)
                r = int(a.get("--rank", "0"))
                local.append(r)
                if r in seen:
                    fail(f"{where}: rank {r} runs twice (also in pod {seen[r]})")
                seen[r] = index
                if a.get("--rank-host") != pod_ip:
                    fail(f"{where}: rank {r} --rank-host={a.get('--rank-host')}, expected its pod's IP {pod_ip}")
                if r == 0:
                    if index != 0:
                        fail(f"{where}: rank 0 outside the leader pod")
                    if not first_process:
                        fail(f"{where}: rank 0 is not the container's first process (the launcher must exec "
                             f"it): SIGTERM would not start its drain, nor its exit end the pod's other ranks")
                    if a.get("--rank-launch") != "remote":
                        fail(f"{where}: rank 0 without --rank-launch=remote (it would fork its ranks locally)")
                    if "--rank-store" in a:
                        fail(f"{where}: rank 0 with --rank-store (it serves the store)")
                else:
                    if a.get("--rank-store") != f"{leader_address}:{port}":
                        fail(f"{where}: rank {r} --rank-store={a.get('--rank-store')}, expected the leader's "
                             f"{leader_address}:{port} (LWS_LEADER_ADDRESS on rank 0's --port)")
                    if "--rank-dir" in a:
                        fail(f"{where}: rank {r} with --rank-dir (only local ranks meet in a folder)")
                same = {k: v for k, v in a.items() if k not in RANK_FLAGS}
                want = {k: v for k, v in la.items() if k not in RANK_FLAGS}
                if same != want:
                    diff = sorted(set(same.items()) ^ set(want.items()))
                    fail(f"{where}: rank {r}'s flags differ from rank 0's: {diff}")
            # floe-worker runs rank r on GPU r mod the GPUs its pod sees.
            if gpus:
                if gpus != per_pod:
                    fail(f"{where}: {gpus} GPUs for {per_pod} ranks (one GPU per rank)")
                if len({r % gpus for r in local}) != len(local):
                    fail(f"{where}: ranks {sorted(local)} share GPUs (rank r uses GPU r mod {gpus})")
        if sorted(seen) != list(range(ranks)):
            fail(f"LeaderWorkerSet {name} group {group}: ranks {sorted(seen)}, expected each of 0..{ranks - 1} once")
        if gpu_total and gpu_total != ranks:
            fail(f"LeaderWorkerSet {name}: GPUs per pod add up to {gpu_total}, not T x S = {ranks}")
    return used


def worker_pods(workloads, lwss, scaled_objects, component, pod_labels_of):
    """The worker pods the NetworkPolicy checks evaluate, each with its rank
    group: two replicas of each worker StatefulSet (each pod a group of its
    own: its ranks talk inside it) and every group each LeaderWorkerSet may
    have (its replicas, or KEDA's maximum), plus one past them (a scale
    beyond the values, group None: isolated from the others, what it may do
    inside is not asserted)."""
    out = []
    for w in workloads:
        if component(w) == "worker" and w["kind"] == "StatefulSet":
            for i in (0, 1):
                out.append((f"{w['metadata']['name']}-{i}", pod_labels_of(w), (w["metadata"]["name"], i)))
    for lws in lwss:
        name = lws["metadata"]["name"]
        groups = [int(lws["spec"].get("replicas", 0))] + [
            int(so["spec"].get("maxReplicaCount", 0)) for so in scaled_objects
            if so["spec"]["scaleTargetRef"].get("kind") == "LeaderWorkerSet"
            and so["spec"]["scaleTargetRef"].get("name") == name]
        known = max([1] + groups)
        for group in range(known + 1):
            for index in range(group_size(lws)):
                pod = f"{name}-{group}" + (f"-{index}" if index else "")
                out.append((pod, pod_labels(lws, group, index), (name, group) if group < known else None))
    return out

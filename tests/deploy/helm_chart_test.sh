#!/usr/bin/env bash
# helm lint + helm template of deploy/helm/floe with the default values and
# every value set in ci/, then check_rendered.py on each rendering; values the
# chart must refuse are refused. A missing helm fails (scripts/bootstrap.sh
# installs it into third_party/bin).
#   helm_chart_test.sh [WORKER_BIN ROUTER_BIN SUFFIX_CACHE_BIN]
set -euo pipefail
ROOT=${FLOE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
HELM=${FLOE_HELM:-$ROOT/third_party/bin/helm}
PY=/usr/bin/python3
CHART=$ROOT/deploy/helm/floe
if [[ ! -x $HELM ]]; then
  echo "FAIL: no helm at $HELM (run scripts/bootstrap.sh)"; exit 1
fi
$HELM version --short
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
helps=()
[[ $# -ge 1 && -n $1 ]] && helps+=(--help-of "worker=$1")
[[ $# -ge 2 && -n $2 ]] && helps+=(--help-of "router=$2")
[[ $# -ge 3 && -n $3 ]] && helps+=(--help-of "suffix-cache=$3")

failed=0; passed=0
run() {  # NAME VALUES_FILE(or "") EXPECT...
  local name=$1 values=$2; shift 2
  local vf=(); [[ -n $values ]] && vf=(-f "$values")
  local expects=(); for e in "$@"; do expects+=(--expect "$e"); done
  if $HELM lint "$CHART" "${vf[@]}" --strict >"$TMP/$name.lint" 2>&1 &&
     $HELM template floe "$CHART" -n serving "${vf[@]}" >"$TMP/$name.yaml" 2>"$TMP/$name.err" &&
     $PY "$(dirname "$0")/check_rendered.py" "$TMP/$name.yaml" --values "$values" "${expects[@]}" "${helps[@]}"; then
    echo "ok: $name"; passed=$((passed + 1))
  else
    cat "$TMP/$name.lint" "$TMP/$name.err" 2>/dev/null | grep -v 'symbolic link' || true
    echo "FAIL: $name"; failed=$((failed + 1))
  fi
}
refused() {  # NAME MESSAGE_REGEX VALUES_YAML
  local name=$1 want=$2
  printf '%s\n' "$3" >"$TMP/$name.values.yaml"
  if $HELM template floe "$CHART" -f "$TMP/$name.values.yaml" >/dev/null 2>"$TMP/$name.err"; then
    echo "FAIL: $name: rendered, expected a refusal"; failed=$((failed + 1))
  elif grep -qE "$want" "$TMP/$name.err"; then
    echo "ok: $name refused"; passed=$((passed + 1))
  else
    echo "FAIL: $name: refused without '$want':"; cat "$TMP/$name.err"; failed=$((failed + 1))
  fi
}

run default "" workers=1 routers=1 suffix-caches=1 gpu=1 tp=1 policy=session-affinity \
  kinds=PodDisruptionBudget,NetworkPolicy,Secret no-kinds=ScaledObject,ServiceMonitor,PrometheusRule,LeaderWorkerSet
run cpu-dev "$CHART/ci/cpu-dev-values.yaml" workers=1 routers=1 suffix-caches=1 gpu=0 \
  no-kinds=PodDisruptionBudget,ScaledObject
run gpu-tp8 "$CHART/ci/gpu-tp8-values.yaml" workers=1 routers=1 gpu=8 tp=8 \
  node-selector=nvidia.com/gpu.product:NVIDIA-H200 kinds=ScaledObject,ServiceMonitor,PrometheusRule,PodDisruptionBudget
run multi-model "$CHART/ci/multi-model-values.yaml" workers=3 routers=3 suffix-caches=0 policy=least-outstanding \
  kinds=ScaledObject no-kinds=LeaderWorkerSet
# Multi-node workers (check_rendered.py runs every group's rank processes,
# lws_checks.py): TP 8 x SP 2 over 2 GPU pods (8 ranks each) with KEDA and a
# ServiceMonitor; TP 2 over 2 CPU pods (1 rank each) and TP 2 x SP 2 over 2
# (2 each); TP 8 over 4 GPU pods (2 each) and TP 4 over 4 CPU pods (1 each).
run multi-node "$CHART/ci/multi-node-values.yaml" workers=1 lws=1 nodes=2 gpu=8 tp=8 \
  kinds=LeaderWorkerSet,ScaledObject,ServiceMonitor,PodDisruptionBudget,NetworkPolicy
run multi-node-cpu "$CHART/ci/multi-node-cpu-values.yaml" workers=2 lws=2 nodes=2 gpu=0 tp=2 \
  kinds=LeaderWorkerSet,NetworkPolicy no-kinds=ScaledObject,PodDisruptionBudget
cat >"$TMP/nodes4-values.yaml" <<'EOF'
servingEngineSpec:
  modelSpec:
    - {name: tp8, modelPath: /models/m, requestGPU: 8, tensorParallelSize: 8, nodesPerWorker: 4, replicaCount: 3}
    - {name: tp4-cpu, modelPath: /models/m, requestGPU: 0, tensorParallelSize: 4, nodesPerWorker: 4}
EOF
run nodes4 "$TMP/nodes4-values.yaml" workers=2 lws=2 nodes=4 kinds=LeaderWorkerSet,PodDisruptionBudget,NetworkPolicy

# The TP=8 set: 6 addresses (KEDA's maximum) for the router, the tokenizer from its URL.
grep -q 'floe-worker-llama-3-1-70b-5.floe-worker-llama-3-1-70b.serving.svc.cluster.local:50061' "$TMP/gpu-tp8.yaml" &&
  grep -q -- '--tensor-parallel-size=8' "$TMP/gpu-tp8.yaml" &&
  grep -q -- '--model-name=meta-llama/Llama-3.1-70B-Instruct' "$TMP/gpu-tp8.yaml" &&
  grep -q -- '--tokenizer=/tokenizer/tokenizer.json' "$TMP/gpu-tp8.yaml" &&
  { echo "ok: gpu-tp8 details"; passed=$((passed + 1)); } ||
  { echo "FAIL: gpu-tp8 details"; failed=$((failed + 1)); }

# The multi-node contract, as rendered: the leader's args hold
# --rank-launch=remote, the worker pods' --rank-store (and with one rank per
# pod --rank) at the leader's address; router entries name the leaders; the
# weight cache bound is 90% of sizeLimit; the profile's ConfigMap is mounted.
lws=$(grep -A400 '^kind: LeaderWorkerSet' "$TMP/multi-node-cpu.yaml")
grep -q -- '- --rank-launch=remote' <<<"$lws" &&
  grep -q -- '- --rank-store=$(LWS_LEADER_ADDRESS):50061' <<<"$lws" &&
  grep -q -- '- --rank=$(LWS_WORKER_INDEX)' <<<"$lws" &&
  grep -q -- '"$0" "$@" --rank="$r" &' "$TMP/multi-node-cpu.yaml" &&
  grep -q -- '--weight-cache-max-gb=0.45' "$TMP/multi-node-cpu.yaml" &&
  grep -q -- '--shift-profile=/etc/floe-shift-profile/shift-profile.json' "$TMP/multi-node.yaml" &&
  grep -q 'name: floe-worker-llama-3-1-405b-shift-profile' "$TMP/multi-node.yaml" &&
  grep -q '"floe-worker-llama-3-1-405b-lws-2.floe-worker-llama-3-1-405b-lws.serving.svc.cluster.local:50061"' "$TMP/multi-node.yaml" &&
  grep -q 'name: floe-worker-llama-3-1-405b-lws-ranks-2$' "$TMP/multi-node.yaml" &&
  ! grep -q -- '--weight-cache-max-gb\|--shift-profile\|--rank' "$TMP/default.yaml" &&
  { echo "ok: multi-node details"; passed=$((passed + 1)); } ||
  { echo "FAIL: multi-node details"; failed=$((failed + 1)); }

# The router's OpenAI HTTP API: on by default (port 8000 on the Service and
# the container), probes over HTTP on request, off with httpPort: null.
grep -q -- '--http-port=8000' "$TMP/default.yaml" &&
  grep -A3 -- '- name: http' "$TMP/default.yaml" | grep -q 'port: 8000' &&
  ! grep -q 'httpGet' "$TMP/default.yaml" &&
  printf 'routerSpec: {httpProbes: true}\n' >"$TMP/http-probes.yaml" &&
  $HELM template floe "$CHART" -f "$TMP/http-probes.yaml" >"$TMP/http-probes.out" &&
  grep -A2 'readinessProbe:' "$TMP/http-probes.out" | grep -q 'httpGet' &&
  grep -q 'path: /ready' "$TMP/http-probes.out" && grep -q 'path: /health' "$TMP/http-probes.out" &&
  printf 'routerSpec: {httpPort: null}\n' >"$TMP/http-off.yaml" &&
  $HELM template floe "$CHART" -f "$TMP/http-off.yaml" >"$TMP/http-off.out" &&
  ! grep -q -- '--http-port' "$TMP/http-off.out" &&
  { echo "ok: router http port and probes"; passed=$((passed + 1)); } ||
  { echo "FAIL: router http port and probes"; failed=$((failed + 1)); }

# TLS from a kubernetes.io/tls Secret on every service: the flags (checked
# against each binary's --help by check_rendered.py), the mount, the volume,
# mTLS on request, TCP probes (kubelet probes cannot present a certificate),
# and a ServiceMonitor that scrapes over HTTPS with the Secret's CA.
printf 'tls: {secretName: floe-tls, clientAuth: true}\nserviceMonitor: {enabled: true}\n' >"$TMP/tls-values.yaml"
run tls "$TMP/tls-values.yaml" workers=1 routers=1 suffix-caches=1
[[ $(grep -c -- '--tls-cert=/etc/floe-tls/tls.crt' "$TMP/tls.yaml") == 3 ]] &&
  [[ $(grep -c -- '--tls-client-ca=/etc/floe-tls/ca.crt' "$TMP/tls.yaml") == 3 ]] &&
  [[ $(grep -c 'secretName: floe-tls' "$TMP/tls.yaml") == 3 ]] &&
  [[ $(grep -c 'mountPath: /etc/floe-tls' "$TMP/tls.yaml") == 3 ]] &&
  grep -A1 'readinessProbe:' "$TMP/tls.yaml" | grep -q 'tcpSocket' &&
  grep -q 'scheme: https' "$TMP/tls.yaml" &&
  grep -q 'serverName: floe-router-llama-3-1-8b.serving.svc$' "$TMP/tls.yaml" &&
  grep -q 'keySecret: {name: floe-tls, key: tls.key}' "$TMP/tls.yaml" &&
  ! grep -q 'scheme: https' "$TMP/gpu-tp8.yaml" &&
  ! grep -q -- '--tls' "$TMP/default.yaml" &&
  { echo "ok: tls on every service"; passed=$((passed + 1)); } ||
  { echo "FAIL: tls on every service"; failed=$((failed + 1)); }

# API keys from a Secret, with per-tenant rate limits.
printf 'routerSpec: {apiKeys: {secretName: floe-keys, rateLimitRps: 5}}\n' >"$TMP/keys.yaml" &&
  $HELM lint "$CHART" -f "$TMP/keys.yaml" --strict >/dev/null &&
  $HELM template floe "$CHART" -f "$TMP/keys.yaml" >"$TMP/keys.out" &&
  grep -q -- '--api-key-file=/etc/floe-keys/api-keys.txt' "$TMP/keys.out" &&
  grep -q -- '--rate-limit-rps=5' "$TMP/keys.out" && grep -q 'secretName: floe-keys' "$TMP/keys.out" &&
  ! grep -q -- '--api-key-file' "$TMP/default.yaml" &&
  { echo "ok: router api keys"; passed=$((passed + 1)); } ||
  { echo "FAIL: router api keys"; failed=$((failed + 1)); }

# Internal trust (check_rendered.py evaluates the NetworkPolicies over the
# rendered pods and checks the internal key's Secret, mount and flag on each
# rendering): off, monitoring elsewhere and the router API narrowed, and
# the key from an existing Secret.
printf 'networkPolicy: {enabled: false}\ninternalKey: {enabled: false}\n' >"$TMP/trust-off-values.yaml"
run trust-off "$TMP/trust-off-values.yaml" workers=1 routers=1 suffix-caches=1 no-kinds=NetworkPolicy,Secret
cat >"$TMP/trust-custom-values.yaml" <<'EOF'
networkPolicy:
  monitoringNamespaceSelector: {matchLabels: {team: observability}}
  monitoringPodSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
  routerIngressFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}
    - podSelector: {matchLabels: {floe.ai/client: "true"}}
internalKey: {existingSecret: my-floe-key, existingSecretKey: internal.key}
EOF
run trust-custom "$TMP/trust-custom-values.yaml" workers=1 routers=1 suffix-caches=1 kinds=NetworkPolicy no-kinds=Secret
[[ $(grep -c -- '--internal-key-file=/etc/floe-internal-key/key' "$TMP/default.yaml") == 3 ]] &&
  [[ $(grep -c 'secretName: my-floe-key' "$TMP/trust-custom.yaml") == 3 ]] &&
  [[ $(grep -c 'key: internal.key' "$TMP/trust-custom.yaml") == 3 ]] &&
  ! grep -q 'kubernetes.io/metadata.name: monitoring' "$TMP/trust-custom.yaml" &&
  ! grep -q -- '--internal-key-file' "$TMP/trust-off.yaml" &&
  [[ $(grep -c 'kind: NetworkPolicy' "$TMP/multi-model.yaml") == 4 ]] &&
  { echo "ok: internal key and network policies"; passed=$((passed + 1)); } ||
  { echo "FAIL: internal key and network policies"; failed=$((failed + 1)); }

refused too-few-gpus "requestGPU 4 is below tensorParallelSize x sequenceParallelSize = 8" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, requestGPU: 4, tensorParallelSize: 4, sequenceParallelSize: 2}'
refused uneven-split "modelSpec\\[m\\]: nodesPerWorker 3 does not divide tensorParallelSize x sequenceParallelSize = 4 x 2 = 8 ranks" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, requestGPU: 8, tensorParallelSize: 4, sequenceParallelSize: 2, nodesPerWorker: 3}'
refused more-pods-than-ranks "nodesPerWorker 4 does not divide .* = 2 ranks" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, tensorParallelSize: 2, nodesPerWorker: 4}'
refused unknown-kv-cache-dtype "kvCacheDtype.*must be one of" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, kvCacheDtype: fp16}'
refused zero-nodes "nodesPerWorker" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, nodesPerWorker: 0}'
refused shift-profile-without-sp "shiftProfile needs sequenceParallelSize > 1" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, shiftProfile: {points: [{tokens: 1, tp_s: 1, sp_s: 2}]}}'
refused shift-profile-not-json "shiftProfile is not a JSON object" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, requestGPU: 2, sequenceParallelSize: 2, shiftProfile: "points: 3"}'
refused shift-profile-no-points "shiftProfile has no points" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, requestGPU: 2, sequenceParallelSize: 2, shiftProfile: "{\"points\": []}"}'
refused bad-size-limit "sizeLimit" '
servingEngineSpec:
  modelDefaults: {weightCache: {sizeLimit: 20GB}}'
refused bad-policy "routingLogic" '
routerSpec: {routingLogic: round-robin}'
refused bad-model-name "name" '
servingEngineSpec:
  modelSpec:
    - {name: Llama_3, modelPath: /models/m}'
refused url-outside-mount "must lie under modelVolume.mountPath" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /data/m, modelURL: "https://example.com/m.tar.gz"}'
refused no-model-source "give modelURL, modelVolume.pvcName or modelVolume.hostPath" '
servingEngineSpec:
  modelSpec:
    - {name: m, modelPath: /models/m, modelVolume: {pvcName: ""}}'
refused bad-speculation "method" '
servingEngineSpec: {modelDefaults: {speculation: {method: eagle}}}'
refused unknown-key "additional properties|additionalProperties|not allowed" '
routerSpec: {replicas: 3}'
refused bad-router-peer "routerIngressFrom" '
networkPolicy: {routerIngressFrom: [{pods: {app: x}}]}'
refused empty-secret-key "existingSecretKey" '
internalKey: {existingSecret: s, existingSecretKey: ""}'

echo "$passed passed, $failed failed"
((failed == 0))

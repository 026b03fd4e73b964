{{/* Names are cut to 63 characters (DNS labels); StatefulSet pods add "-N". */}}
{{- define "floe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "floe.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "floe.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "floe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels. Call with (dict "root" $ "component" "worker" "model" "name"). */}}
{{- define "floe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floe.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if .model }}
floe.ai/model: {{ .model }}
{{- end }}
{{- end -}}

{{/* The pods that serve a model (dict "root" $ "model" M): its worker pods,
     or with nodesPerWorker > 1 its LeaderWorkerSet's leader pods (the LWS
     controller labels them worker-index "0"): the worker Service, the PDB. */}}
{{- define "floe.workerSelectorLabels" -}}
{{ include "floe.selectorLabels" (dict "root" .root "component" "worker" "model" .model.name) }}
{{- if gt (int (default 1 .model.nodesPerWorker)) 1 }}
leaderworkerset.sigs.k8s.io/worker-index: "0"
{{- end }}
{{- end -}}

{{- define "floe.labels" -}}
helm.sh/chart: {{ include "floe.chart" .root }}
{{ include "floe.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: floe
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of the Services Prometheus scrapes; floe.ai/job becomes the job label. */}}
{{- define "floe.metricsServiceLabels" -}}
floe.ai/metrics: "true"
floe.ai/job: floe-{{ . }}
{{- end -}}

{{- define "floe.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "floe.workerName" -}}
{{- printf "%s-worker-%s" (include "floe.fullname" .root) .model.name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.routerName" -}}
{{- printf "%s-router-%s" (include "floe.fullname" .root) .model.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.suffixCacheName" -}}
{{- printf "%s-suffix-cache" (include "floe.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "floe.servedModelName" -}}
{{- default .name .servedModelName -}}
{{- end -}}

{{/* SIGTERM arrives after preStop; the pod is killed after the grace period. */}}
{{- define "floe.terminationGrace" -}}
{{- add .preStopSleepSeconds .drainTimeoutSeconds .terminationGraceMarginSeconds -}}
{{- end -}}

{{- define "floe.preStop" -}}
lifecycle:
  preStop:
    # Lets endpoint removal reach every client before the drain starts.
    exec:
      command: ["/bin/sh", "-c", "sleep {{ .preStopSleepSeconds }}"]
{{- end -}}

{{/* Native gRPC health probes (grpc.health.v1.Health, NOT_SERVING while loading and draining). */}}
{{- define "floe.probes" -}}
{{- $port := .port -}}
{{- $http := and .spec.httpProbes .spec.httpPort -}}
{{- range $kind := list "startupProbe" "readinessProbe" "livenessProbe" }}
{{ $kind }}:
  {{- if $.tls }}
  {{- /* kubelet's gRPC and HTTP probes cannot present a client certificate:
         under TLS a probe only checks that the port accepts connections. */}}
  tcpSocket:
    port: {{ $port }}
  {{- else if $http }}
  httpGet:
    path: {{ ternary "/health" "/ready" (eq $kind "livenessProbe") }}
    port: http
  {{- else }}
  grpc:
    port: {{ $port }}
  {{- end }}
  {{- toYaml (index $.spec $kind) | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "floe.ports" -}}
ports:
  - name: grpc
    containerPort: {{ .port }}
    protocol: TCP
  - name: metrics
    containerPort: {{ .metricsPort }}
    protocol: TCP
{{- if .httpPort }}
  - name: http
    containerPort: {{ .httpPort }}
    protocol: TCP
{{- end }}
{{- end -}}

{{/* The most worker replicas (groups, with nodesPerWorker > 1) one model
     can have: replicaCount, or the autoscaler's maximum. */}}
{{- define "floe.workerMaxReplicas" -}}
{{- $n := int .replicaCount -}}
{{- if and .autoscaling .autoscaling.enabled -}}
{{- $n = int (max $n .autoscaling.maxReplicaCount) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* Worker addresses of one model (up to the autoscaler's maximum): the
     StatefulSet pods' DNS names, or with nodesPerWorker > 1 the leader pods'
     (<lws>-<group>, under the LeaderWorkerSet's headless Service): rank 0
     serves the model, the other pods only run ranks. */}}
{{- define "floe.workerAddresses" -}}
{{- $name := include "floe.workerName" . -}}
{{- if gt (int (default 1 .model.nodesPerWorker)) 1 -}}
{{- $name = include "floe.lwsName" . -}}
{{- end -}}
{{- $addrs := list -}}
{{- range $i := until (include "floe.workerMaxReplicas" .model | int) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc.%s:%d" $name $i $name $.root.Release.Namespace $.root.Values.clusterDomain (int $.root.Values.servingEngineSpec.port)) -}}
{{- end -}}
{{- toJson $addrs -}}
{{- end -}}

{{/* The suffix-cache pods' addresses, comma-separated (the worker's --suffix-cache; its client hashes namespaces over them). */}}
{{- define "floe.suffixCacheAddresses" -}}
{{- $name := include "floe.suffixCacheName" . -}}
{{- $addrs := list -}}
{{- range $i := until (int .Values.suffixCacheSpec.replicaCount) -}}
{{- $addrs = append $addrs (printf "%s-%d.%s.%s.svc.%s:%d" $name $i $name $.Release.Namespace $.Values.clusterDomain (int $.Values.suffixCacheSpec.port)) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* The model specs, each merged over servingEngineSpec.modelDefaults, as a JSON list. */}}
{{- define "floe.models" -}}
{{- $out := list -}}
{{- range $m := .Values.servingEngineSpec.modelSpec -}}
{{- $out = append $out (mergeOverwrite (deepCopy $.Values.servingEngineSpec.modelDefaults) (deepCopy $m)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* TLS (values.tls): the flags every service gets, the mount and the volume. */}}
{{- define "floe.tlsArgs" -}}
- --tls-cert=/etc/floe-tls/tls.crt
- --tls-key=/etc/floe-tls/tls.key
- --tls-ca=/etc/floe-tls/ca.crt
{{- if .clientAuth }}
- --tls-client-ca=/etc/floe-tls/ca.crt
{{- end }}
{{- end -}}

{{- define "floe.tlsMount" -}}
- name: tls
  mountPath: /etc/floe-tls
  readOnly: true
{{- end -}}

{{- define "floe.tlsVolume" -}}
- name: tls
  secret:
    secretName: {{ .secretName }}
{{- end -}}

{{/* Internal key (values.internalKey): the credential every router → worker,
     worker → suffix-cache and rank call carries (--internal-key-file). */}}
{{- define "floe.internalKeySecretName" -}}
{{- default (printf "%s-internal-key" (include "floe.fullname" .) | trunc 63 | trimSuffix "-") .Values.internalKey.existingSecret -}}
{{- end -}}

{{/* The generated key, base64 as a Secret's data holds it: the installed
     Secret's (lookup, so upgrades keep it), else 48 random characters. One
     value per rendering: the Secret and every pod's checksum/internal-key
     annotation must agree, so the first call keeps it in .Values. */}}
{{- define "floe.generatedInternalKey" -}}
{{- if not (hasKey .Values "__floeInternalKey") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "floe.internalKeySecretName" .) -}}
{{- $key := "" -}}
{{- if and $existing $existing.data -}}
{{- $key = index $existing.data "key" | default "" -}}
{{- end -}}
{{- $_ := set .Values "__floeInternalKey" (default (randAlphaNum 48 | b64enc) $key) -}}
{{- end -}}
{{- get .Values "__floeInternalKey" -}}
{{- end -}}

{{- define "floe.internalKeyArgs" -}}
- --internal-key-file=/etc/floe-internal-key/key
{{- end -}}

{{- define "floe.internalKeyMount" -}}
- name: internal-key
  mountPath: /etc/floe-internal-key
  readOnly: true
{{- end -}}

{{/* The Secret's key (existingSecretKey, or "key" in the generated one) is
     always the file "key", whatever it is called in an existing Secret. */}}
{{- define "floe.internalKeyVolume" -}}
- name: internal-key
  secret:
    secretName: {{ include "floe.internalKeySecretName" . }}
    items:
      - key: {{ ternary .Values.internalKey.existingSecretKey "key" (not (empty .Values.internalKey.existingSecret)) }}
        path: key
{{- end -}}

{{/* Pod annotation: a regenerated key (no lookup: helm template, a GitOps
     renderer) rolls every pod, so no pod keeps a key the others dropped.
     Services read the key once, at start. */}}
{{- define "floe.internalKeyAnnotation" -}}
{{- if and .Values.internalKey.enabled (not .Values.internalKey.existingSecret) -}}
checksum/internal-key: {{ include "floe.generatedInternalKey" . | sha256sum }}
{{- end -}}
{{- end -}}

{{/* ---- Workers: what the StatefulSet (nodesPerWorker 1) and the
     LeaderWorkerSet (nodesPerWorker > 1) share. Each takes
     (dict "root" $ "model" M), plus "role" and "plan" for the pod. ---- */}}

{{/* The LeaderWorkerSet of a multi-node model. Not the worker Service's name:
     the LWS controller names its leader StatefulSet and the headless Service
     that gives the group's pods their DNS subdomain after the LWS. Cut to 45
     characters: a group's worker StatefulSet is "<lws>-<group>", its pods
     add "-<index>" and its controller-revision-hash label 11 more (<= 63). */}}
{{- define "floe.lwsName" -}}
{{- printf "%s-lws" (printf "%s-worker-%s" (include "floe.fullname" .root) .model.name | trunc 41 | trimSuffix "-") -}}
{{- end -}}

{{/* The labels the LWS controller gives every pod of one group (dict "lws"
     NAME "group" INDEX). */}}
{{- define "floe.lwsGroupLabels" -}}
leaderworkerset.sigs.k8s.io/name: {{ .lws }}
leaderworkerset.sigs.k8s.io/group-index: {{ .group | quote }}
{{- end -}}

{{/* The rank layout of one model, as JSON: ranks (tensorParallelSize x
     sequenceParallelSize), nodes (pods per worker: nodesPerWorker), perPod
     (the ranks each pod runs) and gpus (per pod). One pod: requestGPU GPUs,
     at least one per rank (0: CPU ranks). Several: the ranks split evenly,
     one GPU each where requestGPU > 0 (a floe-worker rank r uses GPU r mod
     the GPUs its pod sees, so a pod's ranks take GPUs 0..perPod-1). */}}
{{- define "floe.parallel" -}}
{{- $m := .model -}}
{{- $t := int $m.tensorParallelSize -}}
{{- $s := int $m.sequenceParallelSize -}}
{{- $ranks := mul $t $s -}}
{{- $nodes := int (default 1 $m.nodesPerWorker) -}}
{{- $gpus := int $m.requestGPU -}}
{{- if le $nodes 1 -}}
{{- if and (gt $gpus 0) (lt $gpus $ranks) -}}
{{- fail (printf "servingEngineSpec.modelSpec[%s]: requestGPU %d is below tensorParallelSize x sequenceParallelSize = %d" $m.name $gpus $ranks) -}}
{{- end -}}
{{- else if ne (mod $ranks $nodes) 0 -}}
{{- fail (printf "servingEngineSpec.modelSpec[%s]: nodesPerWorker %d does not divide tensorParallelSize x sequenceParallelSize = %d x %d = %d ranks: the pods of a multi-node worker run the same number of ranks each" $m.name $nodes $t $s $ranks) -}}
{{- else if gt $gpus 0 -}}
{{- $gpus = div $ranks $nodes -}}
{{- end -}}
{{- toJson (dict "ranks" $ranks "nodes" $nodes "perPod" (div $ranks $nodes) "gpus" $gpus) -}}
{{- end -}}

{{/* --weight-cache-max-gb (GiB, as the worker reads it) from
     weightCache.sizeLimit, a quantity (200Gi, 500Mi, 100G, ...); empty
     without one. 90% of the limit, rounded down to 0.01: the worker bounds
     only its packed-*.bin files (the one being written included) and spares
     files in use (the ranks of a pod that start together), while the kubelet
     evicts the whole pod once everything in the volume, counted in
     filesystem blocks, passes sizeLimit; an eviction costs a repack (and
     with nodesPerWorker > 1 the whole group), a smaller bound at most an
     older file. */}}
{{- define "floe.weightCacheMaxGB" -}}
{{- $wc := .model.weightCache -}}
{{- if and $wc.enabled $wc.sizeLimit -}}
{{- $q := toString $wc.sizeLimit -}}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $unit := trimPrefix $number $q -}}
{{- if or (not $number) (not (hasKey $units $unit)) -}}
{{- fail (printf "servingEngineSpec.modelSpec[%s]: weightCache.sizeLimit %q is not a quantity the chart reads: digits with an optional fraction and one of the suffixes Ki Mi Gi Ti Pi Ei k M G T P E (e.g. 200Gi)" .model.name $q) -}}
{{- end -}}
{{- $gib := divf (mulf (float64 $number) (index $units $unit) 0.9) 1073741824.0 -}}
{{- if gt $gib 1e6 -}}
{{- fail (printf "servingEngineSpec.modelSpec[%s]: weightCache.sizeLimit %s gives --weight-cache-max-gb %.0f, above the worker's limit 1e6" .model.name $q $gib) -}}
{{- end -}}
{{- regexReplaceAll "\\.?0+$" (printf "%.2f" (divf (floor (mulf $gib 100.0)) 100.0)) "" -}}
{{- end -}}
{{- end -}}

{{/* shiftProfile (bench_shift's JSON: an object, or its text as a string)
     goes into this ConfigMap, mounted where rank 0 runs. */}}
{{- define "floe.shiftProfileName" -}}
{{- printf "%s-shift-profile" (include "floe.workerName" .) -}}
{{- end -}}

{{- define "floe.shiftProfileJSON" -}}
{{- if kindIs "string" .model.shiftProfile -}}
{{- .model.shiftProfile -}}
{{- else -}}
{{- toJson .model.shiftProfile -}}
{{- end -}}
{{- end -}}

{{- define "floe.shiftProfilePath" -}}
/etc/floe-shift-profile/shift-profile.json
{{- end -}}

{{/* The serving flags of every rank process of a model (rank 0's; the
     other ranks get the same plus their own, worker_flags.cc). */}}
{{- define "floe.workerArgs" -}}
{{- $root := .root -}}
{{- $spec := $root.Values.servingEngineSpec -}}
{{- $model := .model -}}
- --model={{ $model.modelPath }}
- --model-name={{ include "floe.servedModelName" $model }}
- --load-format={{ $model.loadFormat }}
- --weight-cache={{ if $model.weightCache.enabled }}/var/cache/floe{{ else }}off{{ end }}
{{- with include "floe.weightCacheMaxGB" . }}
- --weight-cache-max-gb={{ . }}
{{- end }}
- --host=0.0.0.0
- --port={{ $spec.port }}
- --metrics-port={{ $spec.metricsPort }}
- --threads={{ int $model.threads }}
- --kv-cache-gb={{ $model.kvCacheGB }}
- --kv-cache-dtype={{ $model.kvCacheDtype }}
- --max-model-len={{ int $model.maxModelLen }}
- --block-size={{ int $model.blockSize }}
- --max-num-seqs={{ int $model.maxNumSeqs }}
- --max-waiting={{ int $model.maxWaiting }}
- --drain-timeout-s={{ $spec.drainTimeoutSeconds }}
{{- if gt (int $model.tensorParallelSize) 1 }}
- --tensor-parallel-size={{ int $model.tensorParallelSize }}
{{- end }}
{{- if gt (int $model.sequenceParallelSize) 1 }}
- --sequence-parallel-size={{ int $model.sequenceParallelSize }}
{{- end }}
{{- if $model.parallelMode }}
- --parallel-mode={{ $model.parallelMode }}
{{- end }}
{{- if gt (int $model.shiftThreshold) 0 }}
- --shift-threshold={{ int $model.shiftThreshold }}
{{- end }}
{{- if $model.shiftProfile }}
- --shift-profile={{ include "floe.shiftProfilePath" . }}
{{- end }}
{{- with $model.speculation }}
- --speculative={{ .method }}
{{- if ne .method "off" }}
- --num-speculative-tokens={{ int .numSpeculativeTokens }}
{{- end }}
{{- if eq .method "suffix" }}
{{- if $root.Values.suffixCacheSpec.enabled }}
- --suffix-cache={{ include "floe.suffixCacheAddresses" $root }}
{{- end }}
- --speculative-default-namespace={{ default (include "floe.servedModelName" $model) .defaultNamespace }}
{{- if .tree }}
- --speculative-tree
{{- end }}
{{- if .referenceCompatible }}
- --speculative-reference-compatible
{{- end }}
{{- end }}
{{- end }}
{{- if $root.Values.tls.secretName }}
{{ include "floe.tlsArgs" $root.Values.tls }}
{{- end }}
{{- if $root.Values.internalKey.enabled }}
{{ include "floe.internalKeyArgs" $root }}
{{- end }}
{{- range $model.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The ranks a leader pod runs beside rank 0 (ranks 1..perPod-1):
     --rank-launch remote forks none, so each is a process of its own, started
     here; rank 0 then replaces the shell, so it gets SIGTERM and drains, and
     when it exits the kernel ends the pod's other processes with it. The
     others' stdout goes to /dev/null (stdout lines are rank 0's, as with
     local ranks). $0 is floe-worker, "$@" rank 0's flags. */}}
{{- define "floe.leaderRanksScript" -}}
# Ranks 1..{{ sub .plan.perPod 1 }} of this worker run in this pod beside rank 0.
for ((r = 1; r < {{ .plan.perPod }}; r++)); do
  "$0" "$@" --rank="$r" --rank-store="$LWS_LEADER_ADDRESS:{{ .root.Values.servingEngineSpec.port }}" >/dev/null &
done
exec "$0" "$@"
{{- end -}}

{{/* A worker pod's ranks: FIRST..FIRST+perPod-1, FIRST = LWS_WORKER_INDEX x
     perPod, one process each. They ignore SIGTERM (rank 0 stops them after
     its drain; bash, the container's first process, ignores it too); the
     first to exit ends the container, and its restart recreates the group
     (RecreateGroupOnPodRestart). */}}
{{- define "floe.workerRanksScript" -}}
# Ranks FIRST..FIRST+{{ sub .plan.perPod 1 }} of this worker, FIRST = LWS_WORKER_INDEX x {{ .plan.perPod }}.
first=$((LWS_WORKER_INDEX * {{ .plan.perPod }}))
for ((r = first; r < first + {{ .plan.perPod }}; r++)); do
  "$0" "$@" --rank="$r" &
done
wait -n
status=$?
kill $(jobs -p) 2>/dev/null
exit "$status"
{{- end -}}

{{/* A worker pod template (metadata and spec). role: "pod" (a StatefulSet
     pod: every rank, forked by rank 0), "leader" (a LeaderWorkerSet group's
     pod 0: rank 0, serving, and the first perPod-1 ranks) or "follower" (the
     group's other pods: ranks only, no port of their own). */}}
{{- define "floe.workerPodTemplate" -}}
{{- $root := .root -}}
{{- $spec := $root.Values.servingEngineSpec -}}
{{- $model := .model -}}
{{- $role := .role -}}
{{- $plan := .plan -}}
{{- $lws := ne $role "pod" -}}
{{- $rankZero := ne $role "follower" -}}
{{- $shift := and $rankZero $model.shiftProfile -}}
metadata:
  labels:
    {{- include "floe.selectorLabels" (dict "root" $root "component" "worker" "model" $model.name) | nindent 4 }}
    {{- with $spec.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $annotations := include "floe.internalKeyAnnotation" $root }}
  {{- if or $annotations $spec.podAnnotations $shift }}
  annotations:
    {{- with $annotations }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- if $shift }}
    # The worker reads its profile at start: a new one rolls the pods.
    checksum/shift-profile: {{ include "floe.shiftProfileJSON" . | sha256sum }}
    {{- end }}
    {{- with $spec.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
spec:
  terminationGracePeriodSeconds: {{ include "floe.terminationGrace" $spec }}
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $spec.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  {{- with $spec.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $spec.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $model.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $model.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $model.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $model.modelURL }}
  initContainers:
    - name: download-model
      image: {{ $spec.modelDownloader.image }}
      command: ["/bin/sh", "-c"]
      args:
        - |
          set -eu
          if [ -f "$MODEL_PATH/config.json" ]; then echo "model present in $MODEL_PATH"; exit 0; fi
          rm -rf "$MODEL_PATH.partial" && mkdir -p "$MODEL_PATH.partial"
          curl -fsSL --retry 5 "$MODEL_URL" | tar -xz -C "$MODEL_PATH.partial"
          mv "$MODEL_PATH.partial" "$MODEL_PATH"
      env:
        - name: MODEL_URL
          value: {{ $model.modelURL | quote }}
        - name: MODEL_PATH
          value: {{ $model.modelPath | quote }}
      volumeMounts:
        - name: models
          mountPath: {{ $model.modelVolume.mountPath }}
  {{- end }}
  containers:
    - name: worker
      image: {{ include "floe.image" (dict "root" $root "image" $spec.image) }}
      imagePullPolicy: {{ $spec.image.pullPolicy }}
      {{- if and $lws (gt (int $plan.perPod) 1) }}
      # bash starts this pod's {{ $plan.perPod }} rank processes; $0 is floe-worker (the image's entrypoint).
      command:
        - /bin/bash
        - -c
        - |
          {{- include (ternary "floe.leaderRanksScript" "floe.workerRanksScript" $rankZero) . | nindent 10 }}
        - /usr/local/bin/floe-worker
      {{- end }}
      args:
        {{- include "floe.workerArgs" . | nindent 8 }}
        {{- if eq $role "leader" }}
        # Rank 0 serves the rendezvous store on its gRPC port and waits for the
        # other ranks; its collectives listen on the pod's IP.
        - --rank-launch=remote
        - --rank-host=$(POD_IP)
        {{- else if eq $role "follower" }}
        - --rank-store=$(LWS_LEADER_ADDRESS):{{ $spec.port }}
        - --rank-host=$(POD_IP)
        {{- if eq (int $plan.perPod) 1 }}
        - --rank=$(LWS_WORKER_INDEX)
        {{- end }}
        {{- end }}
      {{- if or $lws $model.env }}
      env:
        {{- if $lws }}
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        {{- end }}
        {{- with $model.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      {{- if $rankZero }}
      {{- include "floe.ports" $spec | nindent 6 }}
      {{- include "floe.probes" (dict "port" $spec.port "spec" $spec "tls" $root.Values.tls.secretName) | trim | nindent 6 }}
      {{- include "floe.preStop" $spec | nindent 6 }}
      {{- end }}
      resources:
        requests:
          cpu: {{ $model.requestCPU | quote }}
          memory: {{ $model.requestMemory | quote }}
          {{- if gt (int $plan.gpus) 0 }}
          {{ $model.gpuResourceName }}: {{ int $plan.gpus }}
          {{- end }}
        limits:
          memory: {{ default $model.requestMemory $model.limitMemory | quote }}
          {{- if gt (int $plan.gpus) 0 }}
          {{ $model.gpuResourceName }}: {{ int $plan.gpus }}
          {{- end }}
      {{- with $spec.containerSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: models
          mountPath: {{ $model.modelVolume.mountPath }}
          readOnly: true
        - name: dshm
          mountPath: /dev/shm
        {{- if $model.weightCache.enabled }}
        - name: weight-cache
          mountPath: /var/cache/floe
        {{- end }}
        {{- if $shift }}
        - name: shift-profile
          mountPath: {{ dir (include "floe.shiftProfilePath" .) }}
          readOnly: true
        {{- end }}
        {{- if $root.Values.tls.secretName }}
        {{- include "floe.tlsMount" $root | nindent 8 }}
        {{- end }}
        {{- if $root.Values.internalKey.enabled }}
        {{- include "floe.internalKeyMount" $root | nindent 8 }}
        {{- end }}
  volumes:
    {{- if $root.Values.tls.secretName }}
    {{- include "floe.tlsVolume" $root.Values.tls | nindent 4 }}
    {{- end }}
    {{- if $root.Values.internalKey.enabled }}
    {{- include "floe.internalKeyVolume" $root | nindent 4 }}
    {{- end }}
    - name: dshm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $spec.shmSize }}
    {{- if $model.weightCache.enabled }}
    - name: weight-cache
      emptyDir:
        {{- with $model.weightCache.sizeLimit }}
        sizeLimit: {{ . }}
        {{- else }}
        {}
        {{- end }}
    {{- end }}
    {{- if $shift }}
    - name: shift-profile
      configMap:
        name: {{ include "floe.shiftProfileName" . }}
    {{- end }}
    {{- if $model.modelURL }}
    {{- if not $model.modelCache.size }}
    - name: models
      emptyDir: {}
    {{- end }}
    {{- else if $model.modelVolume.hostPath }}
    - name: models
      hostPath:
        path: {{ $model.modelVolume.hostPath }}
        type: Directory
    {{- else }}
    - name: models
      persistentVolumeClaim:
        claimName: {{ $model.modelVolume.pvcName }}
        readOnly: true
    {{- end }}
{{- end -}}

{{/* The per-pod model cache (modelURL with modelCache.size). */}}
{{- define "floe.modelCacheClaims" -}}
- metadata:
    name: models
  spec:
    accessModes: ["ReadWriteOnce"]
    {{- with .modelCache.storageClassName }}
    storageClassName: {{ . }}
    {{- end }}
    resources:
      requests:
        storage: {{ .modelCache.size }}
{{- end -}}

{{/* The checks every worker rendering makes (dict "root" $ "model" M). */}}
{{- define "floe.checkWorker" -}}
{{- $model := .model -}}
{{- if and $model.modelURL (not (hasPrefix (printf "%s/" $model.modelVolume.mountPath) $model.modelPath)) -}}
{{- fail (printf "servingEngineSpec.modelSpec[%s]: modelPath %s must lie under modelVolume.mountPath %s (modelURL is downloaded there)" $model.name $model.modelPath $model.modelVolume.mountPath) -}}
{{- end -}}
{{- if not (or $model.modelURL $model.modelVolume.pvcName $model.modelVolume.hostPath) -}}
{{- fail (printf "servingEngineSpec.modelSpec[%s]: give modelURL, modelVolume.pvcName or modelVolume.hostPath" $model.name) -}}
{{- end -}}
{{- end -}}

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

{{/* Worker addresses of one model: the StatefulSet pods' DNS names (up to the autoscaler's maximum). */}}
{{- define "floe.workerAddresses" -}}
{{- $name := include "floe.workerName" . -}}
{{- $n := int .model.replicaCount -}}
{{- if and .model.autoscaling .model.autoscaling.enabled -}}
{{- $n = int (max $n .model.autoscaling.maxReplicaCount) -}}
{{- end -}}
{{- $addrs := list -}}
{{- range $i := until $n -}}
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

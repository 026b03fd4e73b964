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

{{/*
sluice.fullname is the name of the release's objects: the release's name
when it holds the chart's (a release named sluice: sluice, sluice-grpc,
sluice-policy, sluice-redis, as in deploy/kubernetes), else
<release>-sluice; fullnameOverride replaces it. At most 56 characters, so
that a suffix (-policy) keeps a Service or Secret name within 63.
*/}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 56 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 56 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* sluice.selectorLabels picks the release's pods. */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* sluice.labels are every object's labels. */}}
{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
sluice.redisSecret is the Secret holding the Redis URL: redis.secretName,
or <fullname>-redis. The chart writes it when redis.url is given;
otherwise it is yours to create, before the pods can start.
*/}}
{{- define "sluice.redisSecret" -}}
{{- .Values.redis.secretName | default (printf "%s-redis" (include "sluice.fullname" .)) -}}
{{- end -}}

{{/* sluice.adminSecret is the Secret holding SLUICE_ADMIN_TOKEN. */}}
{{- define "sluice.adminSecret" -}}
{{- .Values.admin.secretName | default (printf "%s-admin" (include "sluice.fullname" .)) -}}
{{- end -}}

{{/* sluice.adminToken is true when the pods get SLUICE_ADMIN_TOKEN. */}}
{{- define "sluice.adminToken" -}}
{{- if or .Values.admin.token .Values.admin.secretName }}true{{ end -}}
{{- end -}}

{{/* sluice.tlsSecret is the kubernetes.io/tls Secret of tls.enabled. */}}
{{- define "sluice.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "sluice.fullname" .)) -}}
{{- end -}}

{{/*
sluice.validate fails the rendering on values that would deploy a kit
that does not do what it says, each with what to set instead.
*/}}
{{- define "sluice.validate" -}}
{{- $r := .Values.redis -}}
{{- if and (not $r.enabled) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "redis.enabled is false with replicaCount %d: each pod would count alone, and %d pods would admit %d times every limit. Give the pods Redis (redis.url, or redis.secretName naming a Secret that holds the URL), or set replicaCount=1" (int .Values.replicaCount) (int .Values.replicaCount) (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and (not $r.enabled) (or $r.url $r.secretName) -}}
{{- fail "redis.enabled is false, but redis.url or redis.secretName is set: set redis.enabled=true to use that Redis, or leave them empty" -}}
{{- end -}}
{{- if and $r.url (not (regexMatch "^(redis|rediss|unix)://" $r.url)) -}}
{{- fail "redis.url is not a redis://, rediss:// or unix:// URL (a Cluster or Sentinel URL is one of them), such as redis://:PASSWORD@redis:6379/0 (the value is not repeated here: it may hold a password)" -}}
{{- end -}}
{{- if and (eq .Values.admin.auth "all") (not (include "sluice.adminToken" .)) -}}
{{- fail "admin.auth is all, but the pods get no token: sluice serve refuses to start without SLUICE_ADMIN_TOKEN. Set admin.token, or admin.secretName naming a Secret that holds it" -}}
{{- end -}}
{{- if and .Values.tls.clientCA.enabled (not .Values.tls.enabled) -}}
{{- fail "tls.clientCA.enabled needs tls.enabled: mutual TLS is TLS with client certificates" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (ge (int .Values.podDisruptionBudget.maxUnavailable) (int .Values.replicaCount)) -}}
{{- fail (printf "podDisruptionBudget.maxUnavailable %d of replicaCount %d would let a drain take every pod: want fewer" (int .Values.podDisruptionBudget.maxUnavailable) (int .Values.replicaCount)) -}}
{{- end -}}
{{- end -}}

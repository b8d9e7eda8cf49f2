{{/* Chart name. */}}
{{- define "mrtr-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "mrtr-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mrtr-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Common labels. */}}
{{- define "mrtr-gateway.labels" -}}
helm.sh/chart: {{ include "mrtr-gateway.chart" . }}
{{ include "mrtr-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels. */}}
{{- define "mrtr-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mrtr-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
A label selector for the gateway's pods and nothing else the chart runs. The in-chart Redis
carries the selector labels too (its own Deployment's selector adds its component), so a
selector of the gateway's pods leaves it out by its component. Deployment selectors cannot
change on an upgrade, which is why the gateway's pods are told apart this way and not by a
component label of their own.
*/}}
{{- define "mrtr-gateway.gatewaySelector" -}}
matchLabels:
  {{- include "mrtr-gateway.selectorLabels" . | nindent 2 }}
matchExpressions:
  - key: app.kubernetes.io/component
    operator: NotIn
    values: [redis]
{{- end }}

{{- define "mrtr-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mrtr-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Whether the suspended-call store is shared (Redis). */}}
{{- define "mrtr-gateway.sharedStore" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret .Values.redis.enabled }}true{{- end }}
{{- end }}

{{/* The Secret holding the sealing keys, if any. */}}
{{- define "mrtr-gateway.keysSecret" -}}
{{- if .Values.sealing.existingSecret }}
{{- .Values.sealing.existingSecret }}
{{- else if .Values.sealing.keys }}
{{- printf "%s-keys" (include "mrtr-gateway.fullname" .) }}
{{- end }}
{{- end }}

{{/* Refuse configurations that cannot work, at render time. */}}
{{- define "mrtr-gateway.validate" -}}
{{- $replicas := int .Values.replicaCount }}
{{- if and (or (gt $replicas 1) .Values.autoscaling.enabled) (not (include "mrtr-gateway.sharedStore" .)) }}
{{- fail "replicaCount > 1 (or autoscaling) needs a shared Redis store: set redis.url, redis.existingSecret or redis.enabled. Each replica would otherwise hold its own parked calls and refuse the others' retries." }}
{{- end }}
{{- if and .Values.audit.stream.enabled (not (include "mrtr-gateway.sharedStore" .)) }}
{{- fail "audit.stream.enabled needs the store's Redis (the fleet's stream lives there): set redis.url, redis.existingSecret or redis.enabled." }}
{{- end }}
{{- if and (include "mrtr-gateway.sharedStore" .) (not (include "mrtr-gateway.keysSecret" .)) }}
{{- fail "a shared Redis store needs a sealing key every replica shares: set sealing.existingSecret (kubectl create secret generic mrtr-keys --from-literal=keys=\"$(mrtr-gateway keygen)\")." }}
{{- end }}
{{- end }}

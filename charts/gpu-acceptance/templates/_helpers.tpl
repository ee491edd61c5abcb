{{/* Chart name, overridable; 63 characters at most (a DNS label). */}}
{{- define "gpu-acceptance.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: <release>-<chart> unless the release name already holds the chart name. */}}
{{- define "gpu-acceptance.fullname" -}}
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

{{- define "gpu-acceptance.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries (Helm's recommended set). */}}
{{- define "gpu-acceptance.labels" -}}
helm.sh/chart: {{ include "gpu-acceptance.chart" . }}
{{ include "gpu-acceptance.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-acceptance
{{- end }}

{{/* The immutable subset: Deployment selector, Service selector. */}}
{{- define "gpu-acceptance.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-acceptance.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "gpu-acceptance.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-acceptance.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image; the tag defaults to the chart's appVersion. */}}
{{- define "gpu-acceptance.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The workload image of tests that name none: workloadImage, else the workload image of the chart's appVersion. */}}
{{- define "gpu-acceptance.workloadImage" -}}
{{- .Values.workloadImage | default (printf "ghcr.io/gpu-acceptance/workload:%s" .Chart.AppVersion) }}
{{- end }}

{{/* Namespaces whose tests may change nodes: nodeActions.namespaces, else the release's. */}}
{{- define "gpu-acceptance.nodeActionNamespaces" -}}
{{- .Values.nodeActions.namespaces | default (list .Release.Namespace) | join "," }}
{{- end }}

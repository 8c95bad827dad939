{{/*
Names and labels shared by every component's templates.
*/}}

{{/*
The chart's name, or .Values.nameOverride.
*/}}
{{- define "bluedove.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every resource name: the release name, followed by the chart's name unless the
release name already contains it. Kubernetes names are DNS labels: at most 63 characters.
*/}}
{{- define "bluedove.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "bluedove.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels of every resource.
*/}}
{{- define "bluedove.labels" -}}
helm.sh/chart: {{ include "bluedove.chart" . }}
{{ include "bluedove.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
Labels that select a release's pods (add app.kubernetes.io/component per component).
*/}}
{{- define "bluedove.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bluedove.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The matcher StatefulSet's name: what the autoscaler scales (its --statefulset and the
resourceNames of its Role).
*/}}
{{- define "bluedove.matcher.fullname" -}}
{{- printf "%s-matcher" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The autoscaler's Deployment, Role and RoleBinding name.
*/}}
{{- define "bluedove.autoscaler.fullname" -}}
{{- printf "%s-autoscaler" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The autoscaler's ServiceAccount: the one the chart creates, or an existing one named in values.
*/}}
{{- define "bluedove.autoscaler.serviceAccountName" -}}
{{- if .Values.autoscaler.serviceAccount.create -}}
{{- default (include "bluedove.autoscaler.fullname" .) .Values.autoscaler.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.autoscaler.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Names, labels and the image shared by every component's templates. The store URL is in
_store.tpl, validation in _validate.tpl, the pod spec pieces in _pod.tpl.
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
app.kubernetes.io/part-of: bluedove
{{- end -}}

{{/*
Labels that select a release's pods (add app.kubernetes.io/component per component).
*/}}
{{- define "bluedove.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bluedove.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Labels of one component's resources: (dict "ctx" $ "component" "matcher").
*/}}
{{- define "bluedove.componentLabels" -}}
{{ include "bluedove.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
Selector labels of one component's pods: (dict "ctx" $ "component" "matcher").
*/}}
{{- define "bluedove.componentSelectorLabels" -}}
{{ include "bluedove.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The matcher StatefulSet's name: what the autoscaler scales (its --statefulset and the
resourceNames of its Role), and the prefix of every matcher pod's name (= its id).
*/}}
{{- define "bluedove.matcher.fullname" -}}
{{- printf "%s-matcher" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The matchers' headless Service: one DNS record per pod, ready or not (gossip seeds).
*/}}
{{- define "bluedove.matcher.headless" -}}
{{- printf "%s-matcher-headless" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The DNS name gossip seeds come from (--peers-dns), with the matcher port.
*/}}
{{- define "bluedove.matcher.peersDns" -}}
{{- printf "%s.$(POD_NAMESPACE).svc:7001" (include "bluedove.matcher.headless" .) -}}
{{- end -}}

{{/*
The dispatcher Deployment and Service name.
*/}}
{{- define "bluedove.dispatcher.fullname" -}}
{{- printf "%s-dispatcher" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
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

{{/*
The in-chart Redis StatefulSet and its Service.
*/}}
{{- define "bluedove.redis.fullname" -}}
{{- printf "%s-redis" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The space ConfigMap (key space.yaml, mounted at /etc/bluedove/).
*/}}
{{- define "bluedove.space.fullname" -}}
{{- printf "%s-space" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The spaces ConfigMap (key spaces.json, mounted at /etc/bluedove-spaces/ in dispatchers), when .Values.spaces is set.
*/}}
{{- define "bluedove.spaces.fullname" -}}
{{- printf "%s-spaces" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The seed ConfigMap (key seed.json, mounted at /etc/bluedove-seed/ in matchers), when .Values.seed is set.
*/}}
{{- define "bluedove.seed.fullname" -}}
{{- printf "%s-seed" (include "bluedove.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The bluedove image: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "bluedove.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The space ConfigMap's checksum: a pod-template annotation, so a change of space rolls the pods.
*/}}
{{- define "bluedove.spaceChecksum" -}}
checksum/config: {{ include (print .Template.BasePath "/space-configmap.yaml") . | sha256sum }}
{{- end -}}

{{/*
NetworkPolicy pieces. A peer: the pods of one component of this release.
*/}}
{{- define "bluedove.netpol.peer" -}}
- podSelector:
    matchLabels:
      {{- include "bluedove.componentSelectorLabels" . | nindent 6 }}
{{- end -}}

{{/*
Egress every bluedove component needs: DNS (the headless Service's records), the matchers'
port, the dispatchers' gossip port, and the store (bluedove.netpol.storeEgress).
*/}}
{{- define "bluedove.netpol.commonEgress" -}}
- ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
- to:
    {{- include "bluedove.netpol.peer" (dict "ctx" . "component" "matcher") | nindent 4 }}
  ports:
    - {port: 7001, protocol: TCP}
- to:
    {{- include "bluedove.netpol.peer" (dict "ctx" . "component" "dispatcher") | nindent 4 }}
  ports:
    - {port: 7002, protocol: TCP}
{{- include "bluedove.netpol.storeEgress" . }}
{{- end -}}

{{/*
Pieces of every component's pod spec. Each takes (dict "ctx" $ "c" .Values.<component>
"component" "<name>"), the component's values in .c.
*/}}

{{/*
Pod-level fields: pull secrets, security context (the component's merged over the shared one),
scheduling. The component's affinity, when empty, is a soft anti-affinity across nodes.
*/}}
{{- define "bluedove.podCommon" -}}
{{- $secrets := concat (.ctx.Values.imagePullSecrets | default list) (.c.imagePullSecrets | default list) -}}
securityContext:
  {{- include "bluedove.podSecurityContext" . | nindent 2 }}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .c.affinity }}
affinity:
  {{- toYaml .c.affinity | nindent 2 }}
{{- else if .spread }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "bluedove.componentSelectorLabels" (dict "ctx" .ctx "component" .component) | nindent 14 }}
{{- end }}
{{- with .c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The pod security context: the component's own for Redis, else the component's merged over the shared one.
*/}}
{{- define "bluedove.podSecurityContext" -}}
{{- if eq .component "redis" -}}
{{- toYaml .c.podSecurityContext -}}
{{- else -}}
{{- toYaml (mergeOverwrite (deepCopy .ctx.Values.podSecurityContext) (deepCopy (.c.podSecurityContext | default dict))) -}}
{{- end -}}
{{- end -}}

{{/*
The container security context, likewise.
*/}}
{{- define "bluedove.containerSecurityContext" -}}
{{- if eq .component "redis" -}}
{{- toYaml .c.securityContext -}}
{{- else -}}
{{- toYaml (mergeOverwrite (deepCopy .ctx.Values.securityContext) (deepCopy (.c.securityContext | default dict))) -}}
{{- end -}}
{{- end -}}

{{/*
Pod template metadata: labels, the component's annotations, and (with "config" true) the
checksum of the space ConfigMap, so a change of space rolls the pods.
*/}}
{{- define "bluedove.podMetadata" -}}
labels:
  {{- include "bluedove.componentSelectorLabels" (dict "ctx" .ctx "component" .component) | nindent 2 }}
  app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
  {{- with .c.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $spaces := and (eq .component "dispatcher") .ctx.Values.spaces }}
{{- if or .config $spaces .c.podAnnotations }}
annotations:
  {{- if .config }}
  {{- include "bluedove.spaceChecksum" .ctx | nindent 2 }}
  {{- end }}
  {{- if $spaces }}
  checksum/spaces: {{ toJson .ctx.Values.spaces | sha256sum }}
  {{- end }}
  {{- with .c.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
The bluedove container's common env: its pod's name, namespace and IP (args refer to them as
$(POD_NAME) ...), the store URL from a Secret if any, numba's cache on the writable /tmp.
*/}}
{{- define "bluedove.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- include "bluedove.storeEnv" .ctx }}
# The root filesystem is read-only: numba compiles the matchers' kernels into /tmp (an emptyDir).
- name: NUMBA_CACHE_DIR
  value: /tmp/numba-cache
{{- end -}}


{{/*
TLS (.Values.tls): the Secret's files as BLUEDOVE_TLS_* (every component's env), its mount and
its volume; nothing when TLS is off. Takes (dict "ctx" $).
*/}}
{{- define "bluedove.tlsEnv" -}}
{{- if .ctx.Values.tls.enabled }}
- name: BLUEDOVE_TLS_CERT
  value: /etc/bluedove-tls/tls.crt
- name: BLUEDOVE_TLS_KEY
  value: /etc/bluedove-tls/tls.key
- name: BLUEDOVE_TLS_CA
  value: /etc/bluedove-tls/ca.crt
- name: BLUEDOVE_TLS_SERVER_NAME
  value: {{ include "bluedove.tlsServerName" .ctx | quote }}
{{- end }}
{{- end -}}

{{- define "bluedove.tlsServerName" -}}
{{- .Values.tls.serverName | default (printf "%s.%s.svc" (include "bluedove.matcher.headless" .) .Release.Namespace) -}}
{{- end -}}

{{- define "bluedove.tlsMount" -}}
{{- if .ctx.Values.tls.enabled }}
- name: tls
  mountPath: /etc/bluedove-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "bluedove.tlsVolume" -}}
{{- if .ctx.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .ctx.Values.tls.secretName | quote }}
{{- end }}
{{- end -}}

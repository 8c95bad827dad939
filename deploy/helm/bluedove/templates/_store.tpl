{{/*
The store: its URL, the env that carries it (and its password) from Secrets, and the checks of
an external URL. The in-chart Redis' own objects are under redis/.
*/}}

{{/*
The store URL when it is known at render time: externalRedis.url, else the in-chart Redis.
With externalRedis.existingSecret the URL is only known in the pod: see bluedove.storeArg.
A free-form URL, so a Redis Cluster or a TLS (rediss://) URL fits once the store speaks them.
*/}}
{{- define "bluedove.storeUrl" -}}
{{- if .Values.externalRedis.url -}}
{{- .Values.externalRedis.url -}}
{{- else -}}
{{- printf "redis://%s:6379/0" (include "bluedove.redis.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
What follows --store in every component's args: the URL, or $(BLUEDOVE_STORE_URL), which the
kubelet expands from the env entry bluedove.storeEnv adds when the URL is in a Secret.
*/}}
{{- define "bluedove.storeArg" -}}
{{- if .Values.externalRedis.existingSecret -}}
$(BLUEDOVE_STORE_URL)
{{- else -}}
{{- include "bluedove.storeUrl" . -}}
{{- end -}}
{{- end -}}

{{/*
The env entry carrying the store URL from externalRedis.existingSecret (nothing otherwise).
Declared before any entry that refers to it: $(VAR) expands only variables defined earlier.
*/}}
{{- define "bluedove.storeEnv" -}}
{{- if .Values.externalRedis.existingSecret }}
- name: BLUEDOVE_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.externalRedis.existingSecret | quote }}
      key: {{ .Values.externalRedis.existingSecretKey | quote }}
{{- end }}
{{- end -}}

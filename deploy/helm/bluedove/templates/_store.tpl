{{/*
The store: its URL, the env that carries it (and its password) from Secrets, and the checks of
an external URL. The in-chart Redis' own objects are under redis/.
*/}}

{{/*
The store URL when it is known at render time: externalRedis.url, else the in-chart Redis.
With externalRedis.existingSecret the URL is only known in the pod: see bluedove.storeArg.
One server (redis://, rediss://) or a Redis Cluster (redis+cluster://, rediss+cluster://):
bluedove.storeUrl.parse says which, and what is wrong with it.
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
The env entries carrying the store URL from externalRedis.existingSecret and the store's
password from externalRedis.passwordSecret (nothing when neither is set). The URL is declared
before any entry that refers to it: $(VAR) expands only variables defined earlier. The store
client uses BLUEDOVE_STORE_PASSWORD when the URL carries no password: so the URL may stay in
the values (or a ConfigMap) and only the password in a Secret.
*/}}
{{- define "bluedove.storeEnv" -}}
{{- $e := .Values.externalRedis -}}
{{- if $e.existingSecret }}
- name: BLUEDOVE_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ $e.existingSecret | quote }}
      key: {{ $e.existingSecretKey | quote }}
{{- end }}
{{- if $e.passwordSecret }}
- name: BLUEDOVE_STORE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $e.passwordSecret | quote }}
      key: {{ $e.passwordSecretKey | quote }}
{{- end }}
{{- end -}}

{{/*
An external store URL taken apart as the store client takes it (bluedove/store/client.py), so
a URL the pods would refuse at start is refused at render time instead. Takes the URL; gives
JSON: {"problems": [messages], "ports": [each node's port], "password": the URL carries one}.
- one server: redis:// or rediss://, then [user[:password]@]host[:port][/db][?options]; the
  port defaults to 6379; what follows the host is left to the client.
- a Redis Cluster: redis+cluster:// or rediss+cluster://, then [user[:password]@] and its
  startup nodes as host:port, comma-separated; then only "/" or "/0" (a cluster has database 0
  alone) and the options wait=N (replicas each delivery write waits for, >= 0) and wait_ms=T
  (how long at most, >= 1).
Hosts are DNS names, IPv4 or [IPv6] addresses. The messages show the URL with its password as ***.
*/}}
{{- define "bluedove.storeUrl.parse" -}}
{{- $url := . -}}
{{- $problems := list -}}
{{- $ports := list -}}
{{- $host := `(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)` -}}
{{- $prefix := regexFind "^[A-Za-z][A-Za-z0-9+.-]*://" $url -}}
{{- $scheme := lower (trimSuffix "://" $prefix) -}}
{{- $rest := trimPrefix $prefix $url -}}
{{- $netloc := regexFind "^[^/?#]*" $rest -}}
{{- $tail := trimPrefix $netloc $rest -}}
{{- $userinfo := "" -}}
{{- if contains "@" $netloc -}}
{{- $userinfo = regexReplaceAll "@[^@]*$" $netloc "" -}}
{{- end -}}
{{- $hosts := regexReplaceAll "^.*@" $netloc "" -}}
{{- $password := contains ":" $userinfo -}}
{{- if $password -}}
{{- /* Messages show the URL without its password: they end up in logs. */ -}}
{{- $url = printf "%s%s:***@%s%s" $prefix (regexReplaceAll ":.*$" $userinfo "") $hosts $tail -}}
{{- end -}}
{{- if not (has $scheme (list "redis" "rediss" "redis+cluster" "rediss+cluster")) -}}
{{- $problems = append $problems (printf "externalRedis.url %q is not a store URL: it starts with redis:// or rediss:// (one server), or redis+cluster:// or rediss+cluster:// (a Redis Cluster)" $url) -}}
{{- else if hasSuffix "+cluster" $scheme -}}
{{- if not $hosts -}}
{{- $problems = append $problems (printf "externalRedis.url %q names no node: a Redis Cluster's URL is %s://host:port[,host:port...]" $url $scheme) -}}
{{- end -}}
{{- range $node := splitList "," $hosts -}}
{{- if and $hosts (not (regexMatch (printf "^%s:[0-9]{1,5}$" $host) $node)) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: node %q is not host:port (a Redis Cluster's URL lists its nodes as host:port, comma-separated)" $url $node) -}}
{{- else if $hosts -}}
{{- $port := atoi (regexFind "[0-9]+$" $node) -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: node %q: port %d is not in 1-65535" $url $node $port) -}}
{{- else -}}
{{- $ports = append $ports $port -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (regexMatch `^(/0?)?(\?[^#]*)?$` $tail) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: only \"/0\" (a Redis Cluster has database 0 alone) and \"?wait=N&wait_ms=T\" may follow the nodes, not %q" $url $tail) -}}
{{- else -}}
{{- range $kv := splitList "&" (regexReplaceAll `^[^?]*\??` $tail "") -}}
{{- $k := regexReplaceAll "=.*$" $kv "" -}}
{{- $val := trimPrefix "=" (regexFind "=.*$" $kv) -}}
{{- if not $kv -}}
{{- else if not (has $k (list "wait" "wait_ms")) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: unknown option %q (known: wait, wait_ms)" $url $k) -}}
{{- else if and (eq $k "wait") (not (regexMatch "^[0-9]+$" $val)) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: wait=%q is not a whole number >= 0 (the replicas each delivery write waits for)" $url $val) -}}
{{- else if and (eq $k "wait_ms") (not (regexMatch "^0*[1-9][0-9]*$" $val)) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: wait_ms=%q is not a whole number >= 1 (milliseconds)" $url $val) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- else if contains "," $hosts -}}
{{- $problems = append $problems (printf "externalRedis.url %q lists several nodes: a Redis Cluster's URL starts with %s+cluster://" $url $scheme) -}}
{{- else if not (regexMatch (printf "^%s(:[0-9]{1,5})?$" $host) $hosts) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: %q is not host[:port]" $url $hosts) -}}
{{- else -}}
{{- $port := 6379 -}}
{{- if regexMatch ":[0-9]+$" $hosts -}}
{{- $port = atoi (regexFind "[0-9]+$" $hosts) -}}
{{- end -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- $problems = append $problems (printf "externalRedis.url %q: port %d is not in 1-65535" $url $port) -}}
{{- else -}}
{{- $ports = append $ports $port -}}
{{- end -}}
{{- end -}}
{{- toJson (dict "problems" $problems "ports" $ports "password" $password) -}}
{{- end -}}

{{/*
The ports the NetworkPolicies open towards an external store (any address: it is not known
here): externalRedis.ports when set (a Redis Cluster's nodes on several ports), else
externalRedis.port. Gives JSON: a list of ints.
*/}}
{{- define "bluedove.externalRedis.ports" -}}
{{- $ports := list -}}
{{- range $p := (.Values.externalRedis.ports | default (list .Values.externalRedis.port)) -}}
{{- $ports = append $ports (int $p) -}}
{{- end -}}
{{- toJson (uniq $ports) -}}
{{- end -}}

{{/*
Egress to the store: the in-chart Redis pod on 6379, or any address on the external store's
ports (bluedove.externalRedis.ports).
*/}}
{{- define "bluedove.netpol.storeEgress" -}}
{{- if .Values.redis.enabled }}
- to:
    {{- include "bluedove.netpol.peer" (dict "ctx" . "component" "redis") | nindent 4 }}
  ports:
    - {port: 6379, protocol: TCP}
{{- else }}
- ports:
    {{- range $p := include "bluedove.externalRedis.ports" . | fromJsonArray }}
    - {port: {{ int $p }}, protocol: TCP}
    {{- end }}
{{- end }}
{{- end -}}

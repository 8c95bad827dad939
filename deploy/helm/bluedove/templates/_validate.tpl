{{/*
Checks the schema cannot express (relations between values). Every problem is collected and
the render fails once, listing them all, each with what to set.
*/}}
{{- define "bluedove.validateValues" -}}
{{- $errs := list -}}
{{- $v := .Values -}}
{{- if and (not $v.redis.enabled) (not $v.externalRedis.url) (not $v.externalRedis.existingSecret) -}}
{{- $errs = append $errs "no store: redis.enabled is false and neither externalRedis.url nor externalRedis.existingSecret is set (set one, or redis.enabled=true)" -}}
{{- end -}}
{{- if and $v.redis.enabled (or $v.externalRedis.url $v.externalRedis.existingSecret) -}}
{{- $errs = append $errs "two stores: redis.enabled is true and externalRedis is set too (set redis.enabled=false to use the external one)" -}}
{{- end -}}
{{- if and $v.externalRedis.url $v.externalRedis.existingSecret -}}
{{- $errs = append $errs "externalRedis.url and externalRedis.existingSecret are both set (keep one)" -}}
{{- end -}}
{{- if and $v.externalRedis.existingSecret (not $v.externalRedis.existingSecretKey) -}}
{{- $errs = append $errs "externalRedis.existingSecret needs externalRedis.existingSecretKey (the key holding the URL)" -}}
{{- end -}}
{{- $e := $v.externalRedis -}}
{{- if and $e.passwordSecret $v.redis.enabled (not $e.url) (not $e.existingSecret) -}}
{{- $errs = append $errs "externalRedis.passwordSecret with redis.enabled: the in-chart Redis has no password (the password is an external store's: set redis.enabled=false and externalRedis.url or externalRedis.existingSecret)" -}}
{{- end -}}
{{- if and $e.passwordSecret (not $e.passwordSecretKey) -}}
{{- $errs = append $errs "externalRedis.passwordSecret needs externalRedis.passwordSecretKey (the key holding the password)" -}}
{{- end -}}
{{- if $e.url -}}
{{- $url := include "bluedove.storeUrl.parse" $e.url | fromJson -}}
{{- $errs = concat $errs $url.problems -}}
{{- if and $url.password $e.passwordSecret -}}
{{- $errs = append $errs "externalRedis.url carries a password and externalRedis.passwordSecret is set too: the URL's would be used (keep one; the Secret keeps it out of the values)" -}}
{{- end -}}
{{- if and $v.networkPolicy.enabled (not $v.redis.enabled) -}}
{{- $open := list -}}
{{- range $p := include "bluedove.externalRedis.ports" . | fromJsonArray -}}
{{- $open = append $open (int $p) -}}
{{- end -}}
{{- range $p := $url.ports -}}
{{- if not (has (int $p) $open) -}}
{{- $errs = append $errs (printf "externalRedis.url names port %d, which the NetworkPolicies' egress does not open (it opens %s: add it to externalRedis.ports, or set externalRedis.port)" (int $p) (join ", " $open)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (int $v.autoscaler.minMatchers) (int $v.autoscaler.maxMatchers) -}}
{{- $errs = append $errs (printf "autoscaler.minMatchers (%v) is above autoscaler.maxMatchers (%v)" $v.autoscaler.minMatchers $v.autoscaler.maxMatchers) -}}
{{- end -}}
{{- if and $v.autoscaler.enabled $v.matcher.bootMembers -}}
{{- $errs = append $errs "matcher.bootMembers with autoscaler.enabled: the autoscaler starts from one pod, the boot members would be owners that never start (set matcher.bootMembers=false, or autoscaler.enabled=false)" -}}
{{- end -}}
{{- if and $v.autoscaler.enabled (not $v.rbac.create) (not $v.autoscaler.serviceAccount.name) -}}
{{- $errs = append $errs "autoscaler.enabled with rbac.create=false needs autoscaler.serviceAccount.name: an account already allowed get/patch on the matcher StatefulSet's statefulsets/scale" -}}
{{- end -}}
{{- if gt (int $v.dispatcher.hpa.minReplicas) (int $v.dispatcher.hpa.maxReplicas) -}}
{{- $errs = append $errs (printf "dispatcher.hpa.minReplicas (%v) is above dispatcher.hpa.maxReplicas (%v)" $v.dispatcher.hpa.minReplicas $v.dispatcher.hpa.maxReplicas) -}}
{{- end -}}
{{- if and $v.dispatcher.ingress.enabled (not $v.dispatcher.ingress.host) -}}
{{- $errs = append $errs "dispatcher.ingress.enabled needs dispatcher.ingress.host (the name it answers)" -}}
{{- end -}}
{{- if and $v.dispatcher.ingress.tls.enabled (not $v.dispatcher.ingress.enabled) -}}
{{- $errs = append $errs "dispatcher.ingress.tls.enabled needs dispatcher.ingress.enabled (the ingress's TLS; in-cluster TLS is tls.enabled)" -}}
{{- end -}}
{{- if and $v.dispatcher.ingress.tls.enabled (not $v.dispatcher.ingress.tls.secretName) -}}
{{- $errs = append $errs "dispatcher.ingress.tls.enabled needs dispatcher.ingress.tls.secretName (a kubernetes.io/tls Secret for the host)" -}}
{{- end -}}
{{- if and $v.tls.enabled (not $v.tls.secretName) -}}
{{- $errs = append $errs "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt)" -}}
{{- end -}}
{{- if and $v.seed (not $v.matcher.bootMembers) -}}
{{- $errs = append $errs "seed needs matcher.bootMembers=true: the seed places its matchers on the first matcher.replicas pods, which must be the first table's owners" -}}
{{- end -}}
{{- if and $v.seed $v.seed.matchers (ne (int $v.seed.matchers) (int $v.matcher.replicas)) -}}
{{- $errs = append $errs (printf "seed.matchers (%v) differs from matcher.replicas (%v): the seed places one matcher per pod" $v.seed.matchers $v.matcher.replicas) -}}
{{- end -}}
{{- range $i, $d := $v.space.dimensions -}}
{{- if not (lt (float64 $d.min) (float64 $d.max)) -}}
{{- $errs = append $errs (printf "space.dimensions[%d] (%s): min %v is not below max %v" $i $d.name $d.min $d.max) -}}
{{- end -}}
{{- end -}}
{{- if $errs -}}
{{- fail (printf "\n\nbluedove: %d problem(s) in the values:\n  - %s\n" (len $errs) (join "\n  - " $errs)) -}}
{{- end -}}
{{- end -}}

{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name prefix of every resource. */}}
{{- define "tollgate.fullname" -}}
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

{{/* Per-service names; the suffix keeps both under 63 characters. */}}
{{- define "tollgate.router.fullname" -}}
{{- printf "%s-router" (include "tollgate.fullname" . | trunc 56 | trimSuffix "-") -}}
{{- end -}}
{{- define "tollgate.spend.fullname" -}}
{{- printf "%s-spend" (include "tollgate.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{- define "tollgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every resource. */}}
{{- define "tollgate.labels" -}}
helm.sh/chart: {{ include "tollgate.chart" . }}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tollgate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "router"). */}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tollgate.componentLabels" -}}
{{ include "tollgate.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Image reference of one service; call with (dict "ctx" $ "image" .Values.router.image). */}}
{{- define "tollgate.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The Secret mounted into one service, or nothing. */}}
{{- define "tollgate.secretName" -}}
{{- default .ctx.Values.existingSecret .svc.existingSecret -}}
{{- end -}}


{{/*
Kafka security of both services (tg_kafka_opts): security_protocol, sasl, ssl, librdkafka, each
only when set; merged into a kafka: section dict. Call with (dict "kafka" $kafka "v" .Values.kafka).
*/}}
{{- define "tollgate.kafka.security" -}}
{{- $v := .v -}}
{{- if $v.securityProtocol -}}
{{- $_ := set .kafka "security_protocol" $v.securityProtocol -}}
{{- end -}}
{{- $sasl := dict -}}
{{- range $k, $key := dict "mechanism" "mechanism" "username" "username" "password" "password" -}}
{{- if index (default (dict) $v.sasl) $k -}}
{{- $_ := set $sasl $key (index $v.sasl $k) -}}
{{- end -}}
{{- end -}}
{{- if $sasl -}}
{{- $_ := set .kafka "sasl" $sasl -}}
{{- end -}}
{{- $ssl := dict -}}
{{- range $k, $key := dict "caFile" "ca_file" "certFile" "cert_file" "keyFile" "key_file" "keyPassword" "key_password" -}}
{{- if index (default (dict) $v.ssl) $k -}}
{{- $_ := set $ssl $key (index $v.ssl $k) -}}
{{- end -}}
{{- end -}}
{{- if $ssl -}}
{{- $_ := set .kafka "ssl" $ssl -}}
{{- end -}}
{{- if $v.librdkafka -}}
{{- $_ := set .kafka "librdkafka" (deepCopy $v.librdkafka) -}}
{{- end -}}
{{- end -}}

{{/*
The redis: section both services take (url, username, password, tls), from the values' redis
(v), set into the dict redis.
*/}}
{{- define "tollgate.redis" -}}
{{- $_ := set .redis "url" .v.url -}}
{{- if .v.username -}}
{{- $_ := set .redis "username" .v.username -}}
{{- end -}}
{{- if .v.password -}}
{{- $_ := set .redis "password" .v.password -}}
{{- end -}}
{{- $rtls := dict -}}
{{- $vtls := default (dict) .v.tls -}}
{{- range $k, $key := dict "caFile" "ca_file" "certFile" "cert_file" "keyFile" "key_file" "serverName" "server_name" -}}
{{- if index $vtls $k -}}
{{- $_ := set $rtls $key (index $vtls $k) -}}
{{- end -}}
{{- end -}}
{{- if $rtls -}}
{{- $_ := set .redis "tls" $rtls -}}
{{- end -}}
{{- end -}}

{{/*
router-svc configuration: the LiteLLM sections as given, plus the tollgate: section built from
values. Rendered as a YAML document, then re-serialised by the ConfigMap.
*/}}
{{- define "tollgate.router.config" -}}
{{- $r := .Values.router -}}
{{- $general := deepCopy (default (dict) $r.generalSettings) -}}
{{- if not (hasKey $general "master_key") -}}
{{- $_ := set $general "master_key" .Values.masterKey -}}
{{- end -}}
{{- $kafka := dict "brokers" .Values.kafka.brokers "events_topic" .Values.kafka.eventsTopic "control_topic" .Values.kafka.controlTopic -}}
{{- include "tollgate.kafka.security" (dict "kafka" $kafka "v" .Values.kafka) -}}
{{- $spool := dict "dir" $r.spool.dir "max_bytes" ($r.spool.maxBytes | int64) "full_policy" $r.spool.fullPolicy -}}
{{- if $r.spool.fsync -}}
{{- $_ := set $spool "fsync" (toString $r.spool.fsync) -}}
{{- end -}}
{{- $limits := dict "max_body_bytes" ($r.limits.maxBodyBytes | int64) "max_connections" ($r.limits.maxConnections | int64) -}}
{{- $limits = mergeOverwrite $limits (deepCopy (default (dict) $r.limits.extra)) -}}
{{- $tg := dict
      "listen" (printf "0.0.0.0:%d" ($r.port | int))
      "kafka" $kafka
      "spool" $spool
      "limits" $limits
-}}
{{- if $r.threads -}}
{{- $_ := set $tg "threads" ($r.threads | int) -}}
{{- end -}}
{{- if gt ($r.adminPort | int) 0 -}}
{{- $_ := set $tg "admin_listen" (printf "0.0.0.0:%d" ($r.adminPort | int)) -}}
{{- end -}}
{{- if $r.keys -}}
{{- $_ := set $tg "keys" $r.keys -}}
{{- end -}}
{{- if $r.limitSync.enabled -}}
{{- $rr := dict "sync_interval_ms" ($r.limitSync.syncIntervalMs | int64) -}}
{{- include "tollgate.redis" (dict "redis" $rr "v" .Values.redis) -}}
{{- $_ := set $tg "redis" $rr -}}
{{- end -}}
{{- $tg = mergeOverwrite $tg (deepCopy (default (dict) $r.tollgateExtra)) -}}
model_list:
{{- toYaml $r.modelList | nindent 2 }}
router_settings:
{{- toYaml (default (dict) $r.routerSettings) | nindent 2 }}
general_settings:
{{- toYaml $general | nindent 2 }}
{{- $litellm := deepCopy (default (dict) $r.litellmSettings) }}
{{- if and .Values.timezone (not (hasKey $litellm "timezone")) }}
{{- $_ := set $litellm "timezone" .Values.timezone }}
{{- end }}
{{- if $litellm }}
litellm_settings:
{{- toYaml $litellm | nindent 2 }}
{{- end }}
tollgate:
{{- toYaml $tg | nindent 2 }}
{{- end -}}

{{/* spend-svc configuration. */}}
{{- define "tollgate.spend.config" -}}
{{- $s := .Values.spend -}}
{{- $kafka := dict "brokers" .Values.kafka.brokers "topic" .Values.kafka.eventsTopic "control_topic" .Values.kafka.controlTopic "group_id" $s.groupId -}}
{{- include "tollgate.kafka.security" (dict "kafka" $kafka "v" .Values.kafka) -}}
{{- $redis := dict -}}
{{- include "tollgate.redis" (dict "redis" $redis "v" .Values.redis) -}}
{{- $cfg := dict
      "listen" (printf "0.0.0.0:%d" ($s.port | int))
      "master_key" .Values.masterKey
      "kafka" $kafka
      "postgres" (dict "dsn" .Values.postgres.dsn "writers" ($s.postgresWriters | int64))
      "redis" $redis
      "batch" (dict "max_events" ($s.batch.maxEvents | int64) "max_wait_ms" ($s.batch.maxWaitMs | int64))
-}}
{{- if $s.alerting.enabled -}}
{{- $alerting := dict "default_webhook_url" $s.alerting.defaultWebhookUrl "rate_per_second" $s.alerting.ratePerSecond "burst" ($s.alerting.burst | int) "dedupe_window_s" ($s.alerting.dedupeWindowSeconds | int) -}}
{{- if $s.alerting.alertToWebhookUrl -}}
{{- $_ := set $alerting "alert_to_webhook_url" $s.alerting.alertToWebhookUrl -}}
{{- end -}}
{{- $_ := set $cfg "alerting" $alerting -}}
{{- end -}}
{{- if .Values.timezone -}}
{{- $_ := set $cfg "timezone" .Values.timezone -}}
{{- end -}}
{{- $cfg = mergeOverwrite $cfg (deepCopy (default (dict) $s.configExtra)) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* router-svc termination grace: preStop sleep + drain + producer flush + margin. */}}
{{- define "tollgate.router.grace" -}}
{{- $r := .Values.router -}}
{{- if kindIs "invalid" $r.terminationGracePeriodSeconds -}}
{{- add ($r.shutdown.preStopSleepSeconds | int) ($r.shutdown.drainSeconds | int) ($r.shutdown.flushReserveSeconds | int) ($r.shutdown.graceMarginSeconds | int) -}}
{{- else -}}
{{- $r.terminationGracePeriodSeconds | int -}}
{{- end -}}
{{- end -}}

{{/*
Names of the os.environ/NAME references in a rendered configuration, less those set by the
service's extraEnv; call with (dict "config" TEXT "extraEnv" LIST).
*/}}
{{- define "tollgate.envRefs" -}}
{{- $set := list -}}
{{- range .extraEnv -}}
{{- $set = append $set .name -}}
{{- end -}}
{{- $refs := list -}}
{{- range (regexFindAll "os\\.environ/[A-Za-z_][A-Za-z0-9_]*" .config -1) -}}
{{- $name := trimPrefix "os.environ/" . -}}
{{- if not (has $name $set) -}}
{{- $refs = append $refs $name -}}
{{- end -}}
{{- end -}}
{{- $refs | uniq | sortAlpha | join ", " -}}
{{- end -}}

{{/* Pod security context and container security context, shared. */}}
{{- define "tollgate.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}
{{- define "tollgate.securityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* Names and labels. */}}
{{- define "vcproxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "vcproxy.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "vcproxy.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "vcproxy.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vcproxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vcproxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vcproxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "vcproxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "vcproxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vcproxy.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vcproxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "vcproxy.sasl" -}}
{{- if hasPrefix "SASL_" .Values.listener.securityProtocol }}true{{ end -}}
{{- end -}}

{{- define "vcproxy.usersSecret" -}}
{{- default (printf "%s-users" (include "vcproxy.fullname" .)) .Values.credentials.existingSecret -}}
{{- end -}}

{{- define "vcproxy.upstreamSecret" -}}
{{- default (printf "%s-upstream" (include "vcproxy.fullname" .)) .Values.upstreamPassword.existingSecret -}}
{{- end -}}

{{- define "vcproxy.upstreamPassword" -}}
{{- if or .Values.upstreamPassword.existingSecret .Values.upstreamPassword.value }}true{{ end -}}
{{- end -}}

{{/* Paths inside the container. */}}
{{- define "vcproxy.configDir" -}}/etc/vcproxy{{- end -}}

{{/*
The proxy's configuration: the user's `config`, with what the chart owns set over it. One place, so the
ConfigMap (and its checksum) and the ports of the pod and Service cannot disagree.
*/}}
{{- define "vcproxy.config" -}}
{{- $v := .Values -}}
{{- $dir := include "vcproxy.configDir" . -}}
{{- $sidecar := eq $v.mode "sidecar" -}}
{{- $advertised := $v.listener.advertisedHost -}}
{{- if not $advertised -}}
{{- $advertised = ternary "localhost" (printf "%s.%s.svc" (include "vcproxy.fullname" .) .Release.Namespace) $sidecar -}}
{{- end -}}
{{- $listeners := dict
  "host" (ternary "127.0.0.1" "0.0.0.0" $sidecar)
  "advertised_host" $advertised
  "bootstrap_port" (int $v.listener.bootstrapPort)
  "security_protocol" $v.listener.securityProtocol
-}}
{{- if include "vcproxy.sasl" . -}}
{{- $_ := set $listeners "sasl_mechanisms" $v.listener.saslMechanisms -}}
{{- end -}}
{{- if $v.listener.sni.enabled -}}
{{- $sni := dict "broker_host_pattern" $v.listener.sni.brokerHostPattern -}}
{{- with $v.listener.sni.bootstrapHost }}{{ $_ := set $sni "bootstrap_host" . }}{{ end -}}
{{- with $v.listener.sni.advertisedPort }}{{ $_ := set $sni "advertised_port" (int .) }}{{ end -}}
{{- $_ := set $listeners "sni" $sni -}}
{{- else -}}
{{- $_ := set $listeners "broker_port_base" (int $v.listener.brokerPortBase) -}}
{{- end -}}
{{- if $v.tls.enabled -}}
{{- $tls := dict "certfile" (printf "%s/tls/tls.crt" $dir) "keyfile" (printf "%s/tls/tls.key" $dir) "client_auth" $v.tls.clientAuth -}}
{{- if ne $v.tls.clientAuth "none" }}{{ $_ := set $tls "cafile" (printf "%s/tls/ca.crt" $dir) }}{{ end -}}
{{- $_ := set $listeners "tls" $tls -}}
{{- end -}}
{{- $config := deepCopy $v.config -}}
{{- $_ := set $config "listeners" (mergeOverwrite (deepCopy (default (dict) $v.config.listeners)) $listeners) -}}
{{- if include "vcproxy.sasl" . -}}
{{- $_ := set $config "credentials" (dict "users_file" (printf "%s/users/users.yaml" $dir)) -}}
{{- end -}}
{{- if include "vcproxy.upstreamPassword" . -}}
{{- $upstream := deepCopy $v.config.upstream -}}
{{- $_ := set $upstream "sasl_password_file" (printf "%s/upstream/%s" $dir $v.upstreamPassword.key) -}}
{{- $_ := set $config "upstream" $upstream -}}
{{- end -}}
{{- $metrics := dict "enabled" true "host" "0.0.0.0" "port" (int $v.metrics.port) -}}
{{- $_ := set $config "metrics" $metrics -}}
{{- /* Gateway replicas hold each client quota together; while their usage topic is down each holds its clients
to 1/N of it, N the most replicas that may run (docs/quotas.md). A value the config sets itself is kept. */ -}}
{{- $tenancy := default (dict) $v.config.tenancy -}}
{{- if and (not $sidecar) (get $tenancy "enabled") -}}
{{- $tenancy = deepCopy $tenancy -}}
{{- $sharing := deepCopy (default (dict) (get $tenancy "quota_sharing")) -}}
{{- if not (hasKey $sharing "replicas") -}}
{{- $_ := set $sharing "replicas" (int (ternary $v.autoscaling.maxReplicas $v.replicaCount $v.autoscaling.enabled)) -}}
{{- end -}}
{{- $_ := set $tenancy "quota_sharing" $sharing -}}
{{- $_ := set $config "tenancy" $tenancy -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The node ids that get a Service port (port per broker). */}}
{{- define "vcproxy.nodeIds" -}}
{{- range $id := untilStep (int .Values.listener.nodeIds.first) (int (add1 .Values.listener.nodeIds.last)) 1 }}{{ $id }} {{ end -}}
{{- end -}}

{{/* The proxy container: the same in both modes. */}}
{{- define "vcproxy.container" -}}
- name: vcproxy
  image: {{ include "vcproxy.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve", "--config", "{{ include "vcproxy.configDir" . }}/config/config.yaml", "--workers", {{ .Values.workers | toString | quote }}]
  env:
    - name: PYTHONUNBUFFERED
      value: "1"
  ports:
    - name: bootstrap
      containerPort: {{ .Values.listener.bootstrapPort }}
      protocol: TCP
    {{- if not .Values.listener.sni.enabled }}
    {{- range $id := splitList " " (trim (include "vcproxy.nodeIds" .)) }}
    - name: broker-{{ $id }}
      containerPort: {{ add $.Values.listener.brokerPortBase $id }}
      protocol: TCP
    {{- end }}
    {{- end }}
    - name: metrics
      containerPort: {{ .Values.metrics.port }}
      protocol: TCP
  startupProbe:
    httpGet: {path: /healthz, port: metrics}
    periodSeconds: {{ .Values.probes.startup.periodSeconds }}
    failureThreshold: {{ .Values.probes.startup.failureThreshold }}
  readinessProbe:
    httpGet: {path: /readyz, port: metrics}
    periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
    failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
  livenessProbe:
    httpGet: {path: /healthz, port: metrics}
    periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
    failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
  resources: {{- toYaml .Values.resources | nindent 4 }}
  securityContext: {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - {name: config, mountPath: {{ include "vcproxy.configDir" . }}/config, readOnly: true}
    - {name: tmp, mountPath: /tmp}
    {{- if include "vcproxy.sasl" . }}
    - {name: users, mountPath: {{ include "vcproxy.configDir" . }}/users, readOnly: true}
    {{- end }}
    {{- if include "vcproxy.upstreamPassword" . }}
    - {name: upstream, mountPath: {{ include "vcproxy.configDir" . }}/upstream, readOnly: true}
    {{- end }}
    {{- if .Values.tls.enabled }}
    - {name: tls, mountPath: {{ include "vcproxy.configDir" . }}/tls, readOnly: true}
    {{- end }}
{{- end -}}

{{- define "vcproxy.volumes" -}}
- name: config
  configMap: {name: {{ include "vcproxy.fullname" . }}}
- name: tmp
  emptyDir: {sizeLimit: 64Mi}
{{- if include "vcproxy.sasl" . }}
- name: users
  secret: {secretName: {{ include "vcproxy.usersSecret" . }}}
{{- end }}
{{- if include "vcproxy.upstreamPassword" . }}
- name: upstream
  secret: {secretName: {{ include "vcproxy.upstreamSecret" . }}}
{{- end }}
{{- if .Values.tls.enabled }}
- name: tls
  secret: {secretName: {{ .Values.tls.existingSecret }}}
{{- end }}
{{- end -}}

{{/* Pod annotations: a changed config rolls the pods (most of its keys are read at start only). The
Secrets (users, upstream password, TLS) have no checksum: the proxy reloads their files when the kubelet
updates them, without dropping a connection (docs/security.md#reloading). */}}
{{- define "vcproxy.checksums" -}}
checksum/config: {{ include "vcproxy.config" . | sha256sum }}
{{- end -}}

{{/* Checks that a schema cannot express. */}}
{{- define "vcproxy.validate" -}}
{{- $v := .Values -}}
{{- if and $v.listener.sni.enabled (not $v.tls.enabled) -}}
{{- fail "listener.sni.enabled needs tls.enabled (SNI is a TLS server name)" -}}
{{- end -}}
{{- if and $v.tls.enabled (not (hasSuffix "SSL" $v.listener.securityProtocol)) -}}
{{- fail (printf "tls.enabled needs listener.securityProtocol SSL or SASL_SSL, not %s" $v.listener.securityProtocol) -}}
{{- end -}}
{{- if and (hasSuffix "SSL" $v.listener.securityProtocol) (not $v.tls.enabled) -}}
{{- fail (printf "listener.securityProtocol %s needs tls.enabled and tls.existingSecret" $v.listener.securityProtocol) -}}
{{- end -}}
{{- if and $v.tls.enabled (not $v.tls.existingSecret) -}}
{{- fail "tls.enabled needs tls.existingSecret (a kubernetes.io/tls Secret)" -}}
{{- end -}}
{{- if and (include "vcproxy.sasl" .) (not $v.credentials.existingSecret) (not $v.credentials.users) -}}
{{- fail (printf "listener.securityProtocol %s needs credentials.users or credentials.existingSecret" $v.listener.securityProtocol) -}}
{{- end -}}
{{- if gt (int $v.listener.nodeIds.first) (int $v.listener.nodeIds.last) -}}
{{- fail "listener.nodeIds.first must not be above listener.nodeIds.last" -}}
{{- end -}}
{{- $drain := 10.0 -}}
{{- with $v.config.limits }}{{ with .drain_timeout_seconds }}{{ $drain = float64 . }}{{ end }}{{ end -}}
{{- if le (float64 $v.terminationGracePeriodSeconds) (addf $drain 5) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed config.limits.drain_timeout_seconds (%v) by more than 5 s" $v.terminationGracePeriodSeconds $drain) -}}
{{- end -}}
{{- end -}}

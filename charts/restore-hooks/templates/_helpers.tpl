{{/* Chart name, truncated to 63 characters. */}}
{{- define "restore-hooks.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, truncated to 63 characters (some Kubernetes name fields are limited to
this by the DNS naming spec). If the release name contains the chart name it is used as is.
*/}}
{{- define "restore-hooks.fullname" -}}
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

{{/* Chart name and version, as used by the helm.sh/chart label. */}}
{{- define "restore-hooks.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels. */}}
{{- define "restore-hooks.labels" -}}
helm.sh/chart: {{ include "restore-hooks.chart" . }}
{{ include "restore-hooks.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: restore-hooks
{{- end }}

{{/* Selector labels (immutable on the Deployment: never add to these). */}}
{{- define "restore-hooks.selectorLabels" -}}
app.kubernetes.io/name: {{ include "restore-hooks.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Selector labels of one Deployment's pods. Role "serve" (one Deployment) keeps the two labels the
chart always had (Deployment selectors are immutable); the split Deployments add
app.kubernetes.io/component, so the Service and the PDB can pick the webhook pods only.
Call: include "restore-hooks.roleSelectorLabels" (dict "root" $ "role" "webhook")
*/}}
{{- define "restore-hooks.roleSelectorLabels" -}}
{{ include "restore-hooks.selectorLabels" .root }}
{{- if ne .role "serve" }}
app.kubernetes.io/component: {{ .role }}
{{- end }}
{{- end }}

{{/* The Deployments' roles: [webhook, controller] with split.enabled (the default), else [serve]. */}}
{{- define "restore-hooks.roles" -}}
{{- if .Values.split.enabled }}["webhook", "controller"]{{ else }}["serve"]{{ end }}
{{- end }}

{{/* The role whose pods the Service, the webhooks and the PDB target. */}}
{{- define "restore-hooks.webhookRole" -}}
{{- if .Values.split.enabled }}webhook{{ else }}serve{{ end }}
{{- end }}

{{/*
One role's pod setting (resources, nodeSelector, tolerations, affinity) as YAML: the component's
own key when non-empty, else the top-level key (the chart's values before per-component keys
existed, so old values files keep working). The own key REPLACES the top-level one, it is not
merged with it: `controller.resources: {limits: {memory: 1Gi}}` drops the top-level requests,
exactly as Kubernetes would read that object. The controller Deployment (split.enabled) reads
controller.*; the webhook Deployment, and the single `serve` Deployment of split.enabled=false
(which serves the webhook), read webhook.*.
Call: include "restore-hooks.roleSetting" (dict "root" $ "role" "webhook" "key" "resources")
*/}}
{{- define "restore-hooks.roleSetting" -}}
{{- $v := .root.Values }}
{{- $own := ternary $v.controller $v.webhook (eq .role "controller") }}
{{- $x := get $own .key }}
{{- if $x }}{{ toYaml $x }}{{ else if (get $v .key) }}{{ toYaml (get $v .key) }}{{ end }}
{{- end }}

{{/* One role's priorityClassName, by the precedence of roleSetting ("" = none). */}}
{{- define "restore-hooks.rolePriorityClassName" -}}
{{- $v := .root.Values }}
{{- $own := ternary $v.controller $v.webhook (eq .role "controller") }}
{{- default $v.priorityClassName $own.priorityClassName }}
{{- end }}

{{/* The distinct non-empty priorityClassNames of this release's pods, as a YAML list. */}}
{{- define "restore-hooks.priorityClassNames" -}}
{{- $names := list }}
{{- range $role := include "restore-hooks.roles" . | fromYamlArray }}
{{- $n := include "restore-hooks.rolePriorityClassName" (dict "root" $ "role" $role) }}
{{- if and $n (not (has $n $names)) }}{{ $names = append $names $n }}{{ end }}
{{- end }}
{{- toYaml $names }}
{{- end }}

{{/* Whether one role's pods run in the node's network namespace (webhook.hostNetwork). */}}
{{- define "restore-hooks.roleHostNetwork" -}}
{{- and (ne .role "controller") .root.Values.webhook.hostNetwork }}
{{- end }}

{{/* Name of one role's Deployment. */}}
{{- define "restore-hooks.deploymentName" -}}
{{- $fullname := include "restore-hooks.fullname" .root }}
{{- if eq .role "serve" }}{{ $fullname }}{{ else }}{{ printf "%s-%s" $fullname .role }}{{ end }}
{{- end }}

{{/*
Name of the ServiceAccount that runs the controller (the one that may exec). With
split.enabled=false the single Deployment runs under it.
*/}}
{{- define "restore-hooks.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "restore-hooks.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* (split.enabled, the default) Name of the webhook's ServiceAccount: no exec, no pod writes. */}}
{{- define "restore-hooks.webhookServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-webhook" (include "restore-hooks.fullname" .)) .Values.serviceAccount.webhookName }}
{{- else }}
{{- required "serviceAccount.webhookName is required when serviceAccount.create=false and split.enabled=true (the default; split.enabled=false runs one Deployment under serviceAccount.name)" .Values.serviceAccount.webhookName }}
{{- end }}
{{- end }}

{{/* ServiceAccount of one role's pods. */}}
{{- define "restore-hooks.roleServiceAccountName" -}}
{{- if eq .role "webhook" }}{{ include "restore-hooks.webhookServiceAccountName" .root }}{{ else }}{{ include "restore-hooks.serviceAccountName" .root }}{{ end }}
{{- end }}

{{/* The username the API server sees for the controller: the only one that may write pod hook state. */}}
{{- define "restore-hooks.controllerUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "restore-hooks.serviceAccountName" .) }}
{{- end }}

{{/* Name of the Secret holding the plan key (docs/behaviour.md §9.2); the binary creates it. */}}
{{- define "restore-hooks.planKeySecretName" -}}
{{- printf "%s-plan-key" (include "restore-hooks.fullname" .) }}
{{- end }}

{{/*
Seconds of a Go duration written in whole hours, minutes and seconds ("4h", "1h30m", "90s"; the
schema allows no other form). Fails on anything else.
*/}}
{{- define "restore-hooks.durationSeconds" -}}
{{- $d := toString . }}
{{- if not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $d) }}
{{- fail (printf "%q is not a duration of whole hours, minutes and seconds (e.g. 5m, 1h30m)" $d) }}
{{- end }}
{{- $total := 0 }}
{{- range $part := regexFindAll "[0-9]+[hms]" $d -1 }}
{{- $n := atoi (trunc (int (sub (len $part) 1)) $part) }}
{{- $unit := trimPrefix (trunc (int (sub (len $part) 1)) $part) $part }}
{{- $total = add $total (mul $n (get (dict "h" 3600 "m" 60 "s" 1) $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
A memory quantity (resources.limits.memory: 256Mi, 1Gi, 500M, 268435456) in bytes; "" when unset.
*/}}
{{- define "restore-hooks.memoryBytes" -}}
{{- $q := toString . }}
{{- if and . (ne $q "<nil>") }}
{{- if not (regexMatch "^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$" $q) }}
{{- fail (printf "resources.limits.memory %q: write a whole number with an optional Ki, Mi, Gi, Ti, k, M, G or T suffix (e.g. 256Mi)" $q) }}
{{- end }}
{{- $unit := regexFind "[A-Za-z]+$" $q }}
{{- $n := int64 (trimSuffix $unit $q) }}
{{- $scale := get (dict "" 1 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000) $unit }}
{{- mul $n $scale }}
{{- end }}
{{- end }}

{{/*
terminationGracePeriodSeconds of one role's pods. An explicit value wins. Otherwise: a pod that
serves the webhook needs shutdown.delaySeconds + shutdown.graceSeconds + 5 (keep serving while
endpoints update, drain, exit); a pod that runs the controller needs the longest exec it may be
running + 15, so that a rolling update lets the hook finish and its result be recorded
(controller.longestExecTimeout, capped at config.maxExecTimeout); "serve" needs the larger.
*/}}
{{- define "restore-hooks.terminationGracePeriodSeconds" -}}
{{- $v := .root.Values }}
{{- if not (kindIs "invalid" $v.terminationGracePeriodSeconds) }}
{{- int $v.terminationGracePeriodSeconds }}
{{- else }}
{{- $webhook := add $v.shutdown.delaySeconds $v.shutdown.graceSeconds 5 }}
{{- $longest := int (include "restore-hooks.durationSeconds" $v.controller.longestExecTimeout) }}
{{- $cap := int (include "restore-hooks.durationSeconds" $v.config.maxExecTimeout) }}
{{- $controller := add (min $longest $cap) 15 }}
{{- if eq .role "webhook" }}{{ $webhook }}
{{- else if eq .role "controller" }}{{ $controller }}
{{- else }}{{ max $webhook $controller }}
{{- end }}
{{- end }}
{{- end }}

{{/* Image reference: repository@digest, or repository:tag (tag defaults to appVersion). */}}
{{- define "restore-hooks.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Name of the leader-election Lease. */}}
{{- define "restore-hooks.leaseName" -}}
{{- default (printf "%s-controller" (include "restore-hooks.fullname" .)) .Values.config.leaseName }}
{{- end }}

{{/* Name of the serving Certificate (cert-manager). */}}
{{- define "restore-hooks.servingCertificateName" -}}
{{- printf "%s-serving" (include "restore-hooks.fullname" .) }}
{{- end }}

{{/* Name of the Secret holding the serving certificate; validates the non-cert-manager inputs. */}}
{{- define "restore-hooks.tlsSecretName" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-tls" (include "restore-hooks.fullname" .) }}
{{- else }}
{{- include "restore-hooks.requireManualTLS" . }}
{{- .Values.tls.existingSecret }}
{{- end }}
{{- end }}

{{/* The caBundle for the webhook clientConfig when cert-manager is off. */}}
{{- define "restore-hooks.caBundle" -}}
{{- include "restore-hooks.requireManualTLS" . }}
{{- .Values.tls.caBundle | nospace }}
{{- end }}

{{/*
Namespaces never sent to the webhook (namespaceSelector NotIn) and passed to the binary as
--exclude-namespace (the webhook never mutates, the controller never execs into, pods there).
*/}}
{{- define "restore-hooks.excludedNamespaces" -}}
{{- $ns := list .Release.Namespace "kube-system" "kube-node-lease" }}
{{- range .Values.webhook.excludeNamespaces }}
{{- if not (has . $ns) }}
{{- $ns = append $ns . }}
{{- end }}
{{- end }}
{{- toYaml $ns }}
{{- end }}

{{/* Fail rendering on inconsistent values that the JSON schema cannot express. */}}
{{- define "restore-hooks.validate" -}}
{{- $budget := add .Values.shutdown.delaySeconds .Values.shutdown.graceSeconds }}
{{- if and (not (kindIs "invalid" .Values.terminationGracePeriodSeconds)) (le (int .Values.terminationGracePeriodSeconds) (int $budget)) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than shutdown.delaySeconds + shutdown.graceSeconds (%d)" (int .Values.terminationGracePeriodSeconds) (int $budget)) }}
{{- end }}
{{- if not (kindIs "invalid" .Values.config.maxConcurrentPods) }}
{{- fail "config.maxConcurrentPods was renamed to config.maxConcurrentExecs (--max-concurrent-execs: hooks running at once); rename it in your values" }}
{{- end }}
{{- $_ := include "restore-hooks.durationSeconds" .Values.controller.longestExecTimeout }}
{{- $_ := include "restore-hooks.durationSeconds" .Values.config.maxExecTimeout }}
{{- range .Values.webhook.matchConditions }}
{{- if and $.Values.webhook.excludeMirrorPods (eq .name "exclude-mirror-pods") }}
{{- fail "webhook.matchConditions: the name exclude-mirror-pods is the chart's own condition (webhook.excludeMirrorPods); choose another name" }}
{{- end }}
{{- end }}
{{- if .Values.split.enabled }}
{{- $_ := include "restore-hooks.webhookServiceAccountName" . }}
{{- if eq (include "restore-hooks.webhookServiceAccountName" .) (include "restore-hooks.serviceAccountName" .) }}
{{- fail "split.enabled: the webhook and the controller must run under different ServiceAccounts (serviceAccount.webhookName equals serviceAccount.name)" }}
{{- end }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicas)) (gt (int .Values.replicas) 0) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be lower than replicas (%d), or no pod can ever be evicted" (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicas)) }}
{{- end }}
{{- if not .Values.certManager.enabled }}
{{- $_ := include "restore-hooks.tlsSecretName" . }}
{{- $_ := include "restore-hooks.caBundle" . }}
{{- end }}
{{- end }}

{{/* With certManager.enabled=false both tls.existingSecret and tls.caBundle are required. */}}
{{- define "restore-hooks.requireManualTLS" -}}
{{- $missing := list }}
{{- if not .Values.tls.existingSecret }}{{ $missing = append $missing "tls.existingSecret (name of a kubernetes.io/tls Secret in the release namespace)" }}{{ end }}
{{- if not .Values.tls.caBundle }}{{ $missing = append $missing "tls.caBundle (base64 PEM of the CA that signed the serving certificate)" }}{{ end }}
{{- if $missing }}
{{- fail (printf "certManager.enabled=false requires %s; certs/make-certs.sh SERVICE NAMESPACE creates both (see certs/README.md)" (join " and " $missing)) }}
{{- end }}
{{- end }}

{{/* What the API server does with pods while no webhook replica answers, per webhook entry. */}}
{{- define "restore-hooks.whileDown" -}}
pods Velero creates are {{ if eq .Values.webhook.veleroPodFailurePolicy "Fail" }}REJECTED (Velero does not retry them){{ else }}admitted WITHOUT their restore hooks (reported as RestoreHooksNotApplied){{ end }}, and other pods of restore namespaces are {{ if eq .Values.webhook.failurePolicy "Fail" }}rejected (their controllers retry){{ else }}admitted WITHOUT their restore hooks{{ end }}
{{- end }}

{{/*
Labels of the chart's hook objects (helm test, pre-delete): the standard ones, but with their own
app.kubernetes.io/name, so that no Service, PodDisruptionBudget or NetworkPolicy selector of the
release (name + instance) ever picks a hook pod.
Call: include "restore-hooks.hookLabels" (dict "root" $ "hook" "check-webhook")
*/}}
{{- define "restore-hooks.hookLabels" -}}
helm.sh/chart: {{ include "restore-hooks.chart" .root }}
app.kubernetes.io/name: {{ printf "%s-%s" (include "restore-hooks.name" .root) .hook | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .hook }}
{{- if .root.Chart.AppVersion }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: restore-hooks
{{- end }}

{{/* Namespace of the `helm test` dry-run pod (tests.namespace, default <fullname>-test). */}}
{{- define "restore-hooks.testNamespace" -}}
{{- default (printf "%s-test" (include "restore-hooks.fullname" .) | trunc 63 | trimSuffix "-") .Values.tests.namespace }}
{{- end }}

{{/*
The pod spec fields a hook pod shares with the Deployments: image pull secrets, the top-level
nodeSelector and tolerations, and the pod and container securityContext (values-openshift.yaml
adapts them for the restricted-v2 SCC like the Deployments').
*/}}
{{- define "restore-hooks.hookPodCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

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

{{/* ServiceAccount name. */}}
{{- define "restore-hooks.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "restore-hooks.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
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

{{/* Namespaces never sent to the webhook. */}}
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
{{- if le (int .Values.terminationGracePeriodSeconds) (int $budget) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than shutdown.delaySeconds + shutdown.graceSeconds (%d)" (int .Values.terminationGracePeriodSeconds) (int $budget)) }}
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

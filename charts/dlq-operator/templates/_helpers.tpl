{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "dlq-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "dlq-operator.fullname" -}}
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

{{/* Labels selecting the operator Pods. */}}
{{- define "dlq-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dlq-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "dlq-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dlq-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dlq-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "dlq-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dlq-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The leader Lease's name. */}}
{{- define "dlq-operator.leaseName" -}}
{{- default (include "dlq-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The metrics Service's name: Prometheus' job label under a ServiceMonitor. */}}
{{- define "dlq-operator.metricsService" -}}
{{- printf "%s-metrics" (include "dlq-operator.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* Name of the cluster-scoped objects (and of the Role in watchNamespace): the release
namespace is part of it, so that releases of the same name in two namespaces (shards) do
not collide. */}}
{{- define "dlq-operator.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "dlq-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fails the render unless the full name is a DNS-1035 label (Service names must be):
a release name such as "my.rel" or "1rel" is a legal Helm name but not a legal Service. */}}
{{- define "dlq-operator.checkNames" -}}
{{- $full := include "dlq-operator.fullname" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) }}
{{- fail (printf "the object name %q (release name / nameOverride / fullnameOverride) must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter" $full) }}
{{- end }}
{{- end }}

{{/* The container image: repository@digest when image.digest is set, else repository:tag
(tag default: the chart's appVersion). */}}
{{- define "dlq-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Whether the chart runs the retry routers in a Deployment of their own (router.replicas
> 0) instead of inside the operator's process. */}}
{{- define "dlq-operator.routerDeployment" -}}
{{- if gt (int .Values.router.replicas) 0 }}true{{ end }}
{{- end }}

{{/* Full name of the router's objects (Deployment, ServiceAccount, PodDisruptionBudget). */}}
{{- define "dlq-operator.routerFullname" -}}
{{- printf "%s-router" (include "dlq-operator.fullname" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/* Labels selecting the router Pods: a name label of their own, so that neither the
operator's Deployment nor its metrics Service selects them (and the operator's selector,
immutable in a Deployment, stays as it was). */}}
{{- define "dlq-operator.routerSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-router" (include "dlq-operator.name" . | trunc 56 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every router object. */}}
{{- define "dlq-operator.routerLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dlq-operator.routerSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dlq-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the router runs as. */}}
{{- define "dlq-operator.routerServiceAccountName" -}}
{{- if .Values.router.serviceAccount.create }}
{{- default (include "dlq-operator.routerFullname" .) .Values.router.serviceAccount.name }}
{{- else }}
{{- required "router.serviceAccount.name is required when router.serviceAccount.create is false" .Values.router.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The router's metrics Service: Prometheus' job label of the routers under the
ServiceMonitor. */}}
{{- define "dlq-operator.routerMetricsService" -}}
{{- printf "%s-router-metrics" (include "dlq-operator.fullname" . | trunc 48 | trimSuffix "-") }}
{{- end }}

{{/* Name of the router's (Cluster)Role and binding: like dlq-operator.clusterName. */}}
{{- define "dlq-operator.routerClusterName" -}}
{{- printf "%s-router" (include "dlq-operator.clusterName" . | trunc 56 | trimSuffix "-") }}
{{- end }}

{{/* Full name of the console's objects (Deployment, ServiceAccount, Service,
NetworkPolicy). */}}
{{- define "dlq-operator.consoleFullname" -}}
{{- printf "%s-console" (include "dlq-operator.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* Labels selecting the console Pod: a name label of its own, like the router's, so that
no other Deployment, Service or NetworkPolicy of the chart selects it. */}}
{{- define "dlq-operator.consoleSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-console" (include "dlq-operator.name" . | trunc 55 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every console object. */}}
{{- define "dlq-operator.consoleLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dlq-operator.consoleSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dlq-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the console runs as. */}}
{{- define "dlq-operator.consoleServiceAccountName" -}}
{{- if .Values.console.serviceAccount.create }}
{{- default (include "dlq-operator.consoleFullname" .) .Values.console.serviceAccount.name }}
{{- else }}
{{- required "console.serviceAccount.name is required when console.serviceAccount.create is false" .Values.console.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the console's (Cluster)Role and binding for the DeadLetterQueues: like
dlq-operator.clusterName. */}}
{{- define "dlq-operator.consoleClusterName" -}}
{{- printf "%s-console" (include "dlq-operator.clusterName" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* Name of the console's ClusterRole and binding for the TokenReviews and
SubjectAccessReviews (cluster-scoped calls, so cluster-wide even with watchNamespace). */}}
{{- define "dlq-operator.consoleReviewsName" -}}
{{- printf "%s-console-reviews" (include "dlq-operator.clusterName" . | trunc 47 | trimSuffix "-") }}
{{- end }}

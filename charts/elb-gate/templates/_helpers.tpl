{{/*
Names are fixed (elb-gate-*), not release-prefixed: the webhook configurations
and ClusterRoles are cluster-wide, so one elb-gate per cluster.
*/}}

{{- define "elb-gate.namespace" -}}
{{- .Release.Namespace -}}
{{- end }}

{{/* Labels of every object of one component: (dict "root" $ "component" "webhook"). */}}
{{- define "elb-gate.labels" -}}
app.kubernetes.io/name: elb-gate
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: elb-gate
{{ include "elb-gate.standardLabels" .root }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Helm's standard labels, on every object (never in a selector: they change with
a release). manifests/generate.py drops the two that say Helm manages the object
(helm.sh/chart, app.kubernetes.io/managed-by) from the kustomize manifests.
*/}}
{{- define "elb-gate.standardLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Objects that belong to no one component. */}}
{{- define "elb-gate.commonLabels" -}}
app.kubernetes.io/part-of: elb-gate
{{ include "elb-gate.standardLabels" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "elb-gate.selectorLabels" -}}
app.kubernetes.io/name: elb-gate
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* registry/repository:tag, or registry/repository@digest. */}}
{{- define "elb-gate.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}
{{- end }}

{{- define "elb-gate.webhookService" -}}elb-gate-webhook{{- end }}

{{/* The DNS names the serving certificate must carry. */}}
{{- define "elb-gate.dnsNames" -}}
{{- $svc := include "elb-gate.webhookService" . -}}
{{- $ns := include "elb-gate.namespace" . -}}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.cluster.local
{{- end }}

{{/* The gated namespaces, checked: never kube-system or elb-gate's own. */}}
{{- define "elb-gate.gatedNamespaces" -}}
{{- $own := include "elb-gate.namespace" . -}}
{{- if not .Values.gatedNamespaces }}{{ fail "gatedNamespaces: list at least one namespace to gate" }}{{ end -}}
{{- range .Values.gatedNamespaces -}}
{{- if or (eq . "kube-system") (eq . $own) -}}
{{- fail (printf "gatedNamespaces: %q cannot be gated (kube-system and elb-gate's own namespace are always excluded)" .) -}}
{{- end -}}
{{- end -}}
{{- join "," .Values.gatedNamespaces -}}
{{- end }}

{{/*
The namespaceSelector every webhook shares. kube-system and elb-gate's own
namespace are excluded explicitly: the webhook configurations opt out of AKS's
Admissions Enforcer (which would otherwise rewrite this selector), so the
exclusion it would have added is ours to make, and an outage of elb-gate can
never block the system or elb-gate's own recovery.
*/}}
{{- define "elb-gate.namespaceSelector" -}}
{{- $gated := include "elb-gate.gatedNamespaces" . -}}
matchExpressions:
{{- if eq .Values.gatedNamespaceSelection "list" }}
  - key: kubernetes.io/metadata.name
    operator: In
    values: {{ toJson (splitList "," $gated) }}
  # The per-namespace off switch: kubectl label namespace <ns> elb-gate.io/gated=false
  - key: elb-gate.io/gated
    operator: NotIn
    values: ["false"]
{{- else if eq .Values.gatedNamespaceSelection "label" }}
  - key: elb-gate.io/gated
    operator: In
    values: ["true"]
{{- else }}
{{- fail "gatedNamespaceSelection: list or label" }}
{{- end }}
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: ["kube-system", {{ include "elb-gate.namespace" . | quote }}]
{{- end }}

{{/*
The CEL condition of a write search admission judges (the webhook's
matchConditions) and the admission policy guards (admission-policy.yaml): a
CREATE of a Job whose `app` is gated or a near miss of one, or an UPDATE that
adds or changes such an `app` or changes `elb-job-id`. One definition, so the
two can never disagree on what a search Job is.
*/}}
{{- define "elb-gate.searchJobCondition" -}}
has(object.metadata.labels) && 'app' in object.metadata.labels
&& object.metadata.labels['app'].matches('(?i)^(f[il1|]na[il1|][il1|]zer|setup|sub(m|rn)[il1|]t|b[il1|]ast)$')
&& (request.operation == 'CREATE'
|| !has(oldObject.metadata.labels)
|| !('app' in oldObject.metadata.labels)
|| oldObject.metadata.labels['app'] != object.metadata.labels['app']
|| ('elb-job-id' in object.metadata.labels) != ('elb-job-id' in oldObject.metadata.labels)
|| ('elb-job-id' in object.metadata.labels
&& object.metadata.labels['elb-job-id'] != oldObject.metadata.labels['elb-job-id']))
{{- end }}

{{/* clientConfig of one webhook: (dict "root" $ "path" "/validate/jobs"). */}}
{{- define "elb-gate.clientConfig" -}}
service:
  namespace: {{ include "elb-gate.namespace" .root }}
  name: {{ include "elb-gate.webhookService" .root }}
  path: {{ .path }}
  port: 443
{{- with .caBundle }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{- define "elb-gate.criticalClasses" -}}
{{- list "system-cluster-critical" "system-node-critical" | toJson -}}
{{- end }}

{{/* Pod-template annotations that roll a Deployment when its ConfigMaps change. */}}
{{- define "elb-gate.configChecksums" -}}
{{- if .Values.configMaps.create }}
checksum/settings: {{ include "elb-gate.settingsData" . | sha256sum }}
checksum/submitters: {{ include "elb-gate.submittersFile" . | sha256sum }}
{{- end }}
{{- end }}

{{/* ELB_GATE_* / BLAST_* environment of both Deployments. */}}
{{/* The census fence Job of each gated namespace (webhook.censusRead: watch). A Job's
     pod template cannot change, so the name follows the image: another
     webhook.censusFenceImage is another Job, and the upgrade removes the old one. */}}
{{- define "elb-gate.censusFenceJob" -}}
{{- printf "elb-gate-census-fence-%s" (.Values.webhook.censusFenceImage | sha256sum | trunc 8) -}}
{{- end }}

{{- define "elb-gate.censusRead" -}}
{{- if not (has .Values.webhook.censusRead (list "list" "watch")) }}{{ fail "webhook.censusRead: list or watch" }}{{ end -}}
{{- .Values.webhook.censusRead -}}
{{- end }}

{{- define "elb-gate.settingsData" -}}
{{- $s := .Values.settings -}}
{{- if not (has .Values.enforcement (list "deny" "warn")) }}{{ fail "enforcement: deny or warn" }}{{ end -}}
{{- if not (has .Values.orphanPolicy (list "delete" "warn")) }}{{ fail "orphanPolicy: delete or warn" }}{{ end -}}
BLAST_MAX_RUN_CONCURRENCY: {{ $s.maxRunConcurrency | toString | quote }}
BLAST_SUBMIT_LEASE_TTL_SECONDS: {{ $s.leaseTTLSeconds | toString | quote }}
BLAST_LEASE_CLOCK_SKEW_SECONDS: {{ $s.leaseClockSkewSeconds | toString | quote }}
BLAST_FINALIZER_GRACE_SECONDS: {{ $s.finalizerGraceSeconds | toString | quote }}
ELB_GATE_ENFORCEMENT: {{ .Values.enforcement | quote }}
ELB_GATE_NAMESPACES: {{ include "elb-gate.gatedNamespaces" . | quote }}
ELB_GATE_SUBMITTER_IDENTITIES_FILE: /etc/elb-gate/identities/submitters.yaml
ELB_GATE_CONTROLLER_USERS: {{ printf "system:serviceaccount:%s:elb-gate-controller" (include "elb-gate.namespace" .) | quote }}
ELB_GATE_ORPHAN_POLICY: {{ .Values.orphanPolicy | quote }}
ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS: {{ .Values.orphanDeleteAfterSeconds | toString | quote }}
ELB_GATE_RESYNC_SECONDS: {{ $s.resyncSeconds | toString | quote }}
ELB_GATE_LOG_FORMAT: {{ $s.logFormat | quote }}
ELB_GATE_CENSUS_READ: {{ include "elb-gate.censusRead" . | quote }}
{{- if eq (include "elb-gate.censusRead" .) "watch" }}
ELB_GATE_CENSUS_FENCE_JOB: {{ include "elb-gate.censusFenceJob" . | quote }}
{{- end }}
{{- if eq .Values.webhook.registration "controller" }}
ELB_GATE_REGISTRATION_CONFIGMAP: elb-gate-webhook-configurations
ELB_GATE_REGISTRATION_OWNER: elb-gate-webhook
{{- end }}
{{- if or (eq .Values.certificates.source "managed") (eq .Values.webhook.registration "controller") }}
ELB_GATE_CERT_SERVICE: {{ include "elb-gate.webhookService" . | quote }}
ELB_GATE_WEBHOOK_CONFIGURATION: elb-gate
{{- end }}
{{- if eq .Values.certificates.source "managed" }}
{{- $m := .Values.certificates.managed }}
ELB_GATE_CERTIFICATES: managed
ELB_GATE_TLS_SECRET: {{ .Values.certificates.secretName | quote }}
ELB_GATE_CERT_CA_SECRET: {{ $m.caSecretName | quote }}
ELB_GATE_CERT_CA_LIFETIME: {{ $m.caLifetime | quote }}
ELB_GATE_CERT_SERVING_LIFETIME: {{ $m.servingLifetime | quote }}
ELB_GATE_CERT_RENEW_FRACTION: {{ $m.renewFraction | toString | quote }}
ELB_GATE_CERT_OVERLAP: {{ $m.overlap | quote }}
{{- end }}
{{- $clientAuth := include "elb-gate.clientAuthMode" . }}
{{- if ne $clientAuth "off" }}
ELB_GATE_CLIENT_AUTH: {{ $clientAuth | quote }}
ELB_GATE_CLIENT_CA_FILE: /etc/elb-gate/client-ca/ca.crt
ELB_GATE_CLIENT_NAMES: {{ join "," .Values.webhook.clientAuth.names | quote }}
{{- end }}
{{- range $key, $value := $s.extra }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* webhook.clientAuth.mode, checked: off, verify or require (a bare YAML off is false). */}}
{{- define "elb-gate.clientAuthMode" -}}
{{- $auth := .Values.webhook.clientAuth -}}
{{- $mode := $auth.mode | toString -}}
{{- if eq $mode "false" }}{{ $mode = "off" }}{{ end -}}
{{- if not (has $mode (list "off" "verify" "require")) -}}
{{- fail "webhook.clientAuth.mode: off, verify or require" -}}
{{- end -}}
{{- if and (ne $mode "off") (not (and $auth.caBundle $auth.names)) -}}
{{- fail (printf "webhook.clientAuth.mode %s needs caBundle (the CA that signs the API server's admission client certificate) and names (the names it carries)" $mode) -}}
{{- end -}}
{{- $mode -}}
{{- end }}

{{/* Every user / group of `submitters`, as a JSON (and CEL) list of strings. */}}
{{- define "elb-gate.submitterUsers" -}}
{{- $out := list -}}
{{- range .Values.submitters }}{{ $out = concat $out (.users | default list) }}{{ end -}}
{{- $out | uniq | toJson -}}
{{- end }}

{{- define "elb-gate.submitterGroups" -}}
{{- $out := list -}}
{{- range .Values.submitters }}{{ $out = concat $out (.groups | default list) }}{{ end -}}
{{- $out | uniq | toJson -}}
{{- end }}

{{- define "elb-gate.submittersFile" -}}
{{- $file := dict "submitters" (.Values.submitters | default list) -}}
{{- if kindIs "slice" .Values.splitHolders }}{{ $_ := set $file "splitHolders" .Values.splitHolders }}{{ end -}}
{{- $file | toYaml -}}
{{- end }}

{{/* The job label a scrape gives each component (what alerts and the dashboard select). */}}
{{- define "elb-gate.job" -}}elb-gate-{{ . }}-metrics{{- end }}

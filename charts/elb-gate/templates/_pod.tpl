{{/*
Scheduling and security shared by both Deployments' pods:
(dict "root" $ "component" "webhook" "values" .Values.webhook).
*/}}
{{- define "elb-gate.podScheduling" -}}
{{- $v := .values -}}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $pool := .root.Values.systemPool }}
{{- $tolerations := $v.tolerations | default list }}
{{- $affinity := deepCopy ($v.affinity | default dict) }}
{{- if ne $pool "off" }}
{{- $critical := dict "key" "CriticalAddonsOnly" "operator" "Exists" }}
{{- if not (has $critical $tolerations) }}
{{- $tolerations = append $tolerations $critical }}
{{- end }}
{{- if not (hasKey $affinity "nodeAffinity") }}
{{- $term := dict "matchExpressions" (list (dict "key" "kubernetes.azure.com/mode" "operator" "In" "values" (list "system"))) }}
{{- if eq $pool "required" }}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list $term))) }}
{{- else }}
{{- $_ := set $affinity "nodeAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "preference" $term))) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
{{- $constraints := list }}
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" (include "elb-gate.selectorLabels" (dict "component" $.component) | fromYaml)) }}
{{- end }}
{{- $constraints = append $constraints $constraint }}
{{- end }}
topologySpreadConstraints:
  {{- toYaml $constraints | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
# No service-link variables: the kubelet would set one set per Service of the
# namespace (ELB_GATE_WEBHOOK_SERVICE_HOST, …); elb-gate reads its settings only
# from the ConfigMap and the downward API below, and finds Services by DNS.
enableServiceLinks: false
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/* The container fields both components share (image, settings, identity, hardening). */}}
{{- define "elb-gate.containerCommon" -}}
image: {{ include "elb-gate.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
envFrom:
  - configMapRef:
      name: elb-gate-settings
env:
  - name: ELB_GATE_POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: ELB_GATE_POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* The API group the chosen Prometheus reads its scrape and rule objects from. */}}
{{- define "elb-gate.monitoringApiVersion" -}}
{{- $flavour := .Values.monitoring.flavour -}}
{{- if eq $flavour "prometheus-operator" -}}monitoring.coreos.com/v1
{{- else if eq $flavour "azure-managed-prometheus" -}}azmonitoring.coreos.com/v1
{{- else -}}{{ fail "monitoring.flavour: prometheus-operator or azure-managed-prometheus" }}
{{- end -}}
{{- end }}

{{/* Azure Managed Prometheus drops targets whose labels exceed these unless they are set. */}}
{{- define "elb-gate.azureLimits" -}}
{{- if eq .Values.monitoring.flavour "azure-managed-prometheus" }}
labelLimit: 63
labelNameLengthLimit: 511
labelValueLengthLimit: 1023
{{- end }}
{{- end }}

{{/* elb-gate's two webhook configurations, rendered either as chart objects
     (webhook.registration: chart) or into the ConfigMap the controller registers
     them from (webhook.registration: controller). Context: a dict of root (the
     chart's), caBundle (base64 PEM or "") and annotations. */}}
{{- define "elb-gate.validatingConfiguration" -}}
# elb-gate's admission webhooks (served by `python -m webhook`, Service
# elb-gate-webhook:443 in elb-gate's namespace).
#
# Only gated namespaces are judged, and the matchConditions below let through
# only what a gate acts on, so every other write in the cluster is untouched even
# while the webhook is down (failurePolicy applies to matched requests only). The
# handlers re-check all of this themselves (defence in depth). What each denial
# means and how to fix it: docs/denials.md.
#
# admissions.enforcer/disabled: AKS's Admissions Enforcer would otherwise rewrite
# the namespaceSelector of every webhook here; elb-gate excludes kube-system and
# its own namespace itself (docs/troubleshooting.md, "AKS Admissions Enforcer").
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: elb-gate
  labels:
    {{- include "elb-gate.labels" (dict "root" .root "component" "webhook") | nindent 4 }}
  annotations:
    {{- toYaml .annotations | nindent 4 }}
webhooks:
  # Gate A + Gate B on the Jobs of a search (docs/design.md, "Gate B — search admission").
  # In warn mode this webhook fails open (Ignore): a staged rollout must never
  # block a submit, not even when the webhook is down.
  # NoneOnDryRun: an admission that opens a search or starts a staging writes the
  # namespace's admission record (ConfigMap elb-gate-admissions, compare-and-swap)
  # before it answers, so no two such decisions pass on one observation; a dry run
  # writes nothing (docs/design.md, "Admission is linearizable").
  - name: search-admission.elb-gate.io
    admissionReviewVersions: ["v1"]
    sideEffects: NoneOnDryRun
    failurePolicy: {{ eq .root.Values.enforcement "warn" | ternary "Ignore" "Fail" }}
    timeoutSeconds: {{ int .root.Values.webhook.timeoutSeconds }}
    matchPolicy: Equivalent
    clientConfig:
      {{- include "elb-gate.clientConfig" (dict "root" .root "path" "/validate/jobs" "caBundle" .caBundle) | nindent 6 }}
    namespaceSelector:
      {{- include "elb-gate.namespaceSelector" .root | nindent 6 }}
    rules:
      - apiGroups: ["batch"]
        apiVersions: ["v1"]
        resources: ["jobs"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
    matchConditions:
      # A CREATE of a search Job, or an UPDATE that makes a Job a search Job
      # (adds or changes a gated `app`) or moves it to another search (changes
      # `elb-job-id`). The Job controller's own status/label-free updates never match.
      # The `app` test also sends near misses (any case, `1`/`I`/`|` for `l`, `rn`
      # for `m`: what a label value can hold), which the webhook refuses with a 422
      # naming the exact value; an ordinary Job (app=web, no app) is never sent,
      # so it never depends on the webhook being up. Only standard CEL (`matches`,
      # RE2) is used: it runs the same on every API server since 1.30.
      - name: gated-search-job
        expression: >-
          {{- include "elb-gate.searchJobCondition" .root | nindent 10 }}
  # Gate A's validating rules on the submit Lease (docs/design.md, "Gate A").
  # Judges the stored state (oldObject), which the mutating stamp below wrote on
  # the webhook's clock. Always fail-closed, in warn mode too: a Lease two holders
  # could share would make the gate meaningless, and its refusals are 409s both
  # submit paths already read as "busy".
  - name: lease-guard.elb-gate.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: {{ int .root.Values.webhook.timeoutSeconds }}
    matchPolicy: Equivalent
    clientConfig:
      {{- include "elb-gate.clientConfig" (dict "root" .root "path" "/validate/leases" "caBundle" .caBundle) | nindent 6 }}
    namespaceSelector:
      {{- include "elb-gate.namespaceSelector" .root | nindent 6 }}
    rules:
      - apiGroups: ["coordination.k8s.io"]
        apiVersions: ["v1"]
        resources: ["leases"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        scope: Namespaced
    matchConditions:
      # Leader-election and node Leases never reach elb-gate. A DELETECOLLECTION
      # (what the namespace controller and `DELETE …/leases` send) carries no
      # request.name: each Lease it removes is named only by its oldObject.
      - name: submit-lease
        expression: >-
          (has(request.name) && request.name.startsWith('elb-blast-submit-'))
          || (request.operation == 'DELETE' && oldObject != null
          && oldObject.metadata.name.startsWith('elb-blast-submit-'))
{{- end }}

{{- define "elb-gate.mutatingConfiguration" -}}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: elb-gate
  labels:
    {{- include "elb-gate.labels" (dict "root" .root "component" "webhook") | nindent 4 }}
  annotations:
    {{- toYaml .annotations | nindent 4 }}
webhooks:
  # Stamps holder-user/holder-pod and the webhook's clock (renewTime,
  # acquireTime) on every write to a submit Lease; carries the stamps over a
  # full-object PUT that dropped them. Fail-closed in both modes, as the guard.
  - name: lease-stamp.elb-gate.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: {{ int .root.Values.webhook.timeoutSeconds }}
    matchPolicy: Equivalent
    reinvocationPolicy: Never
    clientConfig:
      {{- include "elb-gate.clientConfig" (dict "root" .root "path" "/mutate/leases" "caBundle" .caBundle) | nindent 6 }}
    namespaceSelector:
      {{- include "elb-gate.namespaceSelector" .root | nindent 6 }}
    rules:
      - apiGroups: ["coordination.k8s.io"]
        apiVersions: ["v1"]
        resources: ["leases"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
    matchConditions:
      - name: submit-lease
        expression: "has(request.name) && request.name.startsWith('elb-blast-submit-')"
{{- end }}

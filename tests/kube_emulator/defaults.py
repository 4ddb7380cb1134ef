"""Defaulting the apiserver applies on every write (only the fields clients commonly read)."""

from __future__ import annotations

from .resources import Obj, ResourceType


def _webhook_defaults(hook: Obj, mutating: bool) -> None:
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    hook.setdefault("timeoutSeconds", 10)
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        rule.setdefault("scope", "*")
    service = (hook.get("clientConfig") or {}).get("service")
    if service is not None:
        service.setdefault("port", 443)


def _job_defaults(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {})
    pod_spec = template.setdefault("spec", {})
    pod_spec.setdefault("dnsPolicy", "ClusterFirst")
    pod_spec.setdefault("schedulerName", "default-scheduler")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    pod_spec.setdefault("securityContext", {})


def _job_selector(obj: Obj) -> None:
    """The Job strategy's generated selector (needs the uid, so only once it exists)."""
    spec, meta = obj["spec"], obj["metadata"]
    if spec.get("manualSelector") or "selector" in spec or not meta.get("uid"):
        return
    uid, name = meta["uid"], meta["name"]
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
              "controller-uid": uid, "job-name": name}
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template_meta = spec["template"].setdefault("metadata", {})
    template_meta["labels"] = {**(template_meta.get("labels") or {}), **labels}


def apply_defaults(rt: ResourceType, obj: Obj) -> Obj:
    """Default `obj` in place (and return it)."""
    if rt.plural == "jobs":
        _job_defaults(obj)
        _job_selector(obj)
    elif rt.plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        for hook in obj.get("webhooks") or []:
            _webhook_defaults(hook, rt.plural.startswith("mutating"))
    elif rt.plural == "leases":
        obj.setdefault("spec", {})
    elif rt.plural == "services":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
    return obj

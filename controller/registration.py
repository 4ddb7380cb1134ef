"""Registration: the leader creates elb-gate's two webhook configurations only once a
webhook Pod serves; the garbage collector removes them with their owner on uninstall,
and ``python -m controller unregister`` (an operator's command) removes them first.

The configurations are the chart's (ConfigMap :attr:`registration_configmap`, one JSON
object per kind). A pass of :meth:`Registrar.sync`:

* no ConfigMap: nothing is registered (the release is being removed, or this mode
  is off) and nothing is changed;
* a configuration absent: created once the webhook Service has a ready endpoint
  (a webhook Pod passed its readiness probe: certificate loaded, API answering),
  with ``ownerReferences`` to ClusterRole :attr:`registration_owner`, so the garbage
  collector deletes it with the release; its caBundle is
  the chart's (``provided``), cainjector's (``cert-manager``), or the managed
  trusted set (:mod:`controller.certificates`), whichever applies;
* a configuration present: updated when the ConfigMap's version of it changed
  (annotation :data:`DIGEST`), keeping each webhook's live caBundle when the
  chart's carries none (the managed certificates' or cainjector's).

A webhook that later loses every endpoint stays registered: fail-closed is the
contract while the release is installed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from elbgate.kube.api import (
    CLUSTERROLES,
    CONFIGMAPS,
    ENDPOINTSLICES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    ApiError,
    KubeApi,
    path,
)
from elbgate.logs import log
from elbgate.settings import ControllerSettings

logger = logging.getLogger("controller.registration")

DIGEST = "elb-gate.io/configuration-digest"
"""Annotation of a registered configuration: sha256 of the ConfigMap's JSON it was made from."""
KEYS = {
    "validatingwebhookconfigurations": "validatingwebhookconfiguration.json",
    "mutatingwebhookconfigurations": "mutatingwebhookconfiguration.json",
}


def has_ready_endpoint(slices: list[dict[str, Any]]) -> bool:
    """Whether any EndpointSlice lists an endpoint that is ready (what the API server's
    calls through the Service reach)."""
    return any(
        (ep.get("conditions") or {}).get("ready") and ep.get("addresses")
        for s in slices
        for ep in s.get("endpoints") or []
    )


def desired_object(
    raw: str, owner: dict[str, Any], ca_bundle: str | None, live: dict[str, Any] | None
) -> dict[str, Any]:
    """The configuration to write: the chart's ``raw`` JSON, owned by ``owner``, each
    webhook's caBundle the chart's, else the live one, else ``ca_bundle``."""
    obj = json.loads(raw)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("annotations", {})[DIGEST] = hashlib.sha256(raw.encode()).hexdigest()
    meta["ownerReferences"] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
    ]
    live_bundles = {
        h.get("name"): (h.get("clientConfig") or {}).get("caBundle")
        for h in (live or {}).get("webhooks") or []
    }
    for hook in obj.get("webhooks") or []:
        client = hook.setdefault("clientConfig", {})
        if not client.get("caBundle"):
            bundle = live_bundles.get(hook.get("name")) or ca_bundle
            if bundle:
                client["caBundle"] = bundle
    if live is not None:
        meta["resourceVersion"] = live["metadata"]["resourceVersion"]
    return obj


class Registrar:
    """Creates and updates the two configurations (the leader only)."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        settings: ControllerSettings,
        *,
        ca_bundle: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.configmap = settings.registration_configmap
        self.owner = settings.registration_owner
        self.service = settings.cert_service
        self.name = settings.webhook_configuration
        self.ca_bundle = ca_bundle
        self.state = "not run"

    async def _ready(self) -> bool:
        listed = await self.api.list_objects(
            path(ENDPOINTSLICES, self.namespace),
            label_selector=f"kubernetes.io/service-name={self.service}",
        )
        return has_ready_endpoint(listed.get("items") or [])

    async def sync(self) -> str:
        """One pass; returns (and keeps in :attr:`state`) what it found or did."""
        self.state = await self._sync()
        return self.state

    async def _sync(self) -> str:
        source = await self.api.get_or_none(path(CONFIGMAPS, self.namespace, self.configmap))
        if source is None:
            return "no configurations to register"
        data = source.get("data") or {}
        live = {
            "validatingwebhookconfigurations": await self.api.get_or_none(
                path(VALIDATING_WEBHOOK_CONFIGURATIONS, None, self.name)
            ),
            "mutatingwebhookconfigurations": await self.api.get_or_none(
                path(MUTATING_WEBHOOK_CONFIGURATIONS, None, self.name)
            ),
        }
        todo = []
        for kind, key in KEYS.items():
            raw = data.get(key)
            if not raw:
                continue
            current = live[kind]
            digest = hashlib.sha256(raw.encode()).hexdigest()
            seen = ((current or {}).get("metadata") or {}).get("annotations") or {}
            if current is None or seen.get(DIGEST) != digest:
                todo.append((kind, raw, current))
        if not todo:
            return "registered"
        if any(current is None for _k, _r, current in todo) and not await self._ready():
            return "waiting for a ready endpoint of the webhook Service"
        owner = await self.api.get_or_none(path(CLUSTERROLES, None, self.owner))
        if owner is None:
            return f"owner ClusterRole {self.owner} absent: not registering"
        bundle = await self.ca_bundle() if self.ca_bundle is not None else None
        for kind, raw, current in todo:
            body = desired_object(raw, owner, bundle, current)
            if kind == "validatingwebhookconfigurations":
                if current is None:
                    await self.api.create(path(VALIDATING_WEBHOOK_CONFIGURATIONS), body)
                else:
                    await self.api.replace(
                        path(VALIDATING_WEBHOOK_CONFIGURATIONS, None, self.name), body
                    )
            elif current is None:
                await self.api.create(path(MUTATING_WEBHOOK_CONFIGURATIONS), body)
            else:
                await self.api.replace(path(MUTATING_WEBHOOK_CONFIGURATIONS, None, self.name), body)
            log(
                logger,
                logging.INFO,
                "webhook configuration " + ("registered" if current is None else "updated"),
                kind=kind,
                name=self.name,
            )
        return "registered"


async def _deleted(call: Awaitable[Any]) -> bool:
    """True when the DELETE removed something; False when it was already absent."""
    try:
        await call
    except ApiError as exc:
        if exc.not_found:
            return False
        raise
    return True


async def unregister(api: KubeApi, namespace: str, settings: ControllerSettings) -> list[str]:
    """Delete the ConfigMap (so no leader registers again), then both configurations;
    what was deleted. Absent objects are fine (an install that never served)."""
    name = settings.webhook_configuration
    deleted = []
    if await _deleted(api.delete(path(CONFIGMAPS, namespace, settings.registration_configmap))):
        deleted.append("configmap")
    if await _deleted(api.delete(path(VALIDATING_WEBHOOK_CONFIGURATIONS, None, name))):
        deleted.append("validatingwebhookconfiguration")
    if await _deleted(api.delete(path(MUTATING_WEBHOOK_CONFIGURATIONS, None, name))):
        deleted.append("mutatingwebhookconfiguration")
    return deleted

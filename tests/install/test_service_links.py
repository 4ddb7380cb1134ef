"""No Service anyone creates can break elb-gate's settings.

The kubelet gives a container one set of "service link" variables per Service of
its namespace (unless the Pod sets ``enableServiceLinks: false``): a Service named
``elb-gate-webhook`` yields ``ELB_GATE_WEBHOOK_PORT=tcp://<clusterIP>:443``. Had a
setting of that name existed, both Deployments would exit at start-up with
``invalid settings: ELB_GATE_WEBHOOK_PORT='tcp://…': not a whole number``.

``kubelet_service_links`` is written from the kubelet's own rules
(``pkg/kubelet/envvars``: ``FromServices`` and ``makeLinkVariables``), not from
elb-gate's code, so the tests hold the settings against what a real node sets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from elbgate.settings import Settings, SettingsError, describe
from tests.install.chart import render
from tests.install.rendering import INSTALL_TARGETS, Obj, select

CLUSTER_IP = "10.96.149.78"
SETTING_NAMES = tuple(name for name, _default, _doc in describe())
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def kubelet_service_links(services: Iterable[Obj]) -> dict[str, str]:
    """The variables a kubelet sets in a container for ``services`` (headless ones
    give none): ``<NAME>_SERVICE_HOST``, ``<NAME>_SERVICE_PORT``, one
    ``<NAME>_SERVICE_PORT_<PORT NAME>`` per named port, and the Docker-link set
    ``<NAME>_PORT`` (first port) and ``<NAME>_PORT_<n>_<PROTO>{,_PROTO,_PORT,_ADDR}``."""
    env: dict[str, str] = {}
    for svc in services:
        spec = svc["spec"]
        ip = spec.get("clusterIP", CLUSTER_IP)
        if ip in ("", "None"):
            continue
        prefix = _env_name(svc["metadata"]["name"])
        ports = spec["ports"]
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{_env_name(port['name'])}"] = str(port["port"])
        for i, port in enumerate(ports):
            proto = port.get("protocol", "TCP")
            url = f"{proto.lower()}://{ip}:{port['port']}"
            if i == 0:
                env[f"{prefix}_PORT"] = url
            link = f"{prefix}_PORT_{port['port']}_{proto.upper()}"
            env[link] = url
            env[f"{link}_PROTO"] = proto.lower()
            env[f"{link}_PORT"] = str(port["port"])
            env[f"{link}_ADDR"] = ip
    return env


def _service(name: str, port_names: Iterable[str] = ()) -> Obj:
    ports: list[dict[str, Any]] = [{"port": 443, "protocol": "TCP"}]
    ports += [{"name": n, "port": 1000 + i, "protocol": "TCP"} for i, n in enumerate(port_names)]
    if len(ports) > 1:
        ports[0]["name"] = "first"
    return {"metadata": {"name": name}, "spec": {"clusterIP": CLUSTER_IP, "ports": ports}}


def services_named_after_every_setting() -> list[Obj]:
    """For every setting, a Service named after each of its underscore prefixes
    (``elb``, ``elb-gate``, ``elb-gate-webhook``, …), its ports named after each
    remaining tail: every name a kubelet could turn into that setting's variable."""
    out: dict[str, set[str]] = {}
    for var in SETTING_NAMES:
        words = var.split("_")
        for cut in range(1, len(words)):
            name = "-".join(words[:cut]).lower()
            if not DNS_1035.match(name):
                continue
            tails = out.setdefault(name, set())
            for start in range(cut, len(words)):
                tail = "-".join(words[start:]).lower()
                if DNS_1035.match(tail) and len(tail) <= 15:  # a port name's limit
                    tails.add(tail)
    return [_service(name, sorted(tails)) for name, tails in sorted(out.items())]


def _parses_to_the_defaults(env: Mapping[str, str]) -> None:
    try:
        settings = Settings.from_env(env)
    except SettingsError as exc:  # pragma: no cover - the failure being guarded against
        pytest.fail(f"the kubelet's service-link variables break the settings: {exc}")
    assert settings == Settings.from_env({})


def test_the_kubelets_variables_for_the_charts_own_services_leave_the_settings_at_their_defaults() -> (
    None
):
    services = select(render(), "Service")
    assert {s["metadata"]["name"] for s in services} >= {"elb-gate-webhook"}
    env = kubelet_service_links(services)
    assert "ELB_GATE_WEBHOOK_PORT" in env  # the variable that crashed both Deployments
    _parses_to_the_defaults(env)


@pytest.mark.parametrize("target", INSTALL_TARGETS)
def test_the_kubelets_variables_for_every_kustomize_targets_services_leave_the_settings_alone(
    rendered: dict[str, list[Obj]], target: str
) -> None:
    _parses_to_the_defaults(kubelet_service_links(select(rendered[target], "Service")))


def test_no_service_named_after_any_setting_can_set_or_break_one() -> None:
    services = services_named_after_every_setting()
    env = kubelet_service_links(services)
    assert len(services) > 20 and "ELB_GATE_METRICS_PORT" in env
    assert not set(env) & set(SETTING_NAMES), "a kubelet variable shadows a setting"
    _parses_to_the_defaults(env)


def test_no_setting_has_a_name_the_kubelet_generates() -> None:
    generated = re.compile(
        r"(_SERVICE_HOST|_SERVICE_PORT(_[A-Z0-9_]+)?|_PORT|_PORT_\d+_[A-Z]+(_PROTO|_PORT|_ADDR)?)$"
    )
    assert [n for n in SETTING_NAMES if generated.search(n)] == []


@pytest.mark.parametrize("old", ["ELB_GATE_WEBHOOK_PORT", "ELB_GATE_METRICS_PORT"])
def test_a_renamed_port_setting_set_by_hand_is_refused_with_its_new_name(old: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({old: "8444"})
    assert f"{old} was renamed {old}_NUMBER" in str(caught.value)


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_neither_deployment_takes_service_links(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    for objects in [render(), *(rendered[t] for t in INSTALL_TARGETS)]:
        (deployment,) = select(objects, "Deployment", f"elb-gate-{component}")
        assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False

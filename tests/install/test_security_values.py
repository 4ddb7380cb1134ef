"""The chart's security values (docs/security.md): who may create search Jobs
(submitterAccess: RBAC and an admission policy), how the webhook tells the API
server from other callers (webhook.clientAuth), and who may reach its port
(networkPolicy.admissionFrom). Each is off by default and renders nothing then."""

from __future__ import annotations

from typing import Any

import pytest

from tests.install.chart import ChartError, render
from tests.install.rendering import Obj, one, select

SUBMITTERS = [
    {
        "name": "dashboard",
        "holderPrefix": "dashboard-",
        "users": ["dashboard-lease", "system:serviceaccount:web:dashboard"],
        "groups": ["dashboard"],
    },
    {"name": "openapi", "holderPrefix": "openapi-", "users": ["system:serviceaccount:web:openapi"]},
]
CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----\n"
ACCESS = {"submitters": SUBMITTERS, "gatedNamespaces": ["default", "blast"]}


def _settings(objects: list[Obj]) -> dict[str, str]:
    data: dict[str, str] = one(objects, "ConfigMap", "elb-gate-settings")["data"]
    return data


def _webhook_pod(objects: list[Obj]) -> dict[str, Any]:
    pod: dict[str, Any] = one(objects, "Deployment", "elb-gate-webhook")["spec"]["template"]["spec"]
    return pod


def _search_admission(objects: list[Obj]) -> dict[str, Any]:
    hooks = one(objects, "ValidatingWebhookConfiguration", "elb-gate")["webhooks"]
    hook: dict[str, Any] = next(h for h in hooks if h["name"] == "search-admission.elb-gate.io")
    return hook


def test_by_default_nothing_restricts_submitters_or_callers() -> None:
    objects = render()
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert not select(objects, "ClusterRole", "elb-gate-submitter")
    assert not any(k.startswith("ELB_GATE_CLIENT") for k in _settings(objects))
    assert not select(objects, "ConfigMap", "elb-gate-webhook-client-ca")
    admission = one(objects, "NetworkPolicy", "elb-gate-webhook")["spec"]["ingress"][0]
    assert admission == {"ports": [{"port": 8443, "protocol": "TCP"}]}  # every source


# -- submitterAccess.rbac -------------------------------------------------------------------


def test_rbac_binds_the_submitters_and_the_in_cluster_account_in_every_gated_namespace() -> None:
    objects = render({**ACCESS, "submitterAccess.rbac": True})
    for ns in ("default", "blast"):
        submitters = one(
            [o for o in objects if o["metadata"].get("namespace") == ns],
            "RoleBinding",
            "elb-gate-submitters",
        )
        assert submitters["roleRef"]["name"] == "elb-gate-submitter"
        assert submitters["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dashboard-lease"},
            {"kind": "ServiceAccount", "namespace": "web", "name": "dashboard"},
            {"kind": "ServiceAccount", "namespace": "web", "name": "openapi"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "dashboard"},
        ]
        in_cluster = one(
            [o for o in objects if o["metadata"].get("namespace") == ns],
            "RoleBinding",
            "elb-gate-in-cluster-submit",
        )
        assert in_cluster["subjects"] == [
            {"kind": "ServiceAccount", "namespace": ns, "name": "default"}
        ]


def _verbs(role: Obj) -> dict[str, set[str]]:
    return {res: set(rule["verbs"]) for rule in role["rules"] for res in rule["resources"]}


def test_the_submit_paths_may_not_delete_the_lease_and_the_in_cluster_job_may_not_touch_it() -> (
    None
):
    objects = render({**ACCESS, "submitterAccess.rbac": True})
    submitter = _verbs(one(objects, "ClusterRole", "elb-gate-submitter"))
    assert submitter["leases"] == {"get", "list", "watch", "create", "update", "patch"}
    assert "create" in submitter["jobs"]
    in_cluster = _verbs(one(objects, "ClusterRole", "elb-gate-in-cluster-submit"))
    assert "leases" not in in_cluster
    assert in_cluster["jobs"] == {"get", "list", "watch", "create", "patch"}
    assert in_cluster["persistentvolumeclaims"] == {"get", "list", "create", "patch"}


def test_another_in_cluster_service_account_is_bound_instead_of_default() -> None:
    objects = render(
        {
            **ACCESS,
            "submitterAccess.rbac": True,
            "submitterAccess.inClusterServiceAccount": "elb-submit",
        }
    )
    bindings = select(objects, "RoleBinding", "elb-gate-in-cluster-submit")
    assert {b["subjects"][0]["name"] for b in bindings} == {"elb-submit"}


# -- submitterAccess.admissionPolicy ---------------------------------------------------------


def test_the_policy_judges_what_search_admission_judges_in_the_same_namespaces() -> None:
    objects = render({**ACCESS, "submitterAccess.admissionPolicy": True})
    policy = one(objects, "ValidatingAdmissionPolicy", "elb-gate-search-jobs")["spec"]
    binding = one(objects, "ValidatingAdmissionPolicyBinding", "elb-gate-search-jobs")["spec"]
    hook = _search_admission(objects)
    assert policy["matchConditions"] == hook["matchConditions"]  # one definition of a search Job
    assert policy["matchConstraints"]["resourceRules"] == [
        {k: v for k, v in rule.items() if k != "scope"} for rule in hook["rules"]
    ]
    assert policy["failurePolicy"] == "Fail"
    assert binding["matchResources"]["namespaceSelector"] == hook["namespaceSelector"]
    assert binding["policyName"] == "elb-gate-search-jobs"


def test_the_policy_names_exactly_the_submitters_and_the_in_cluster_account() -> None:
    objects = render({**ACCESS, "submitterAccess.admissionPolicy": True})
    variables = {
        v["name"]: v["expression"]
        for v in one(objects, "ValidatingAdmissionPolicy", "elb-gate-search-jobs")["spec"][
            "variables"
        ]
    }
    assert variables == {
        "users": '["dashboard-lease","system:serviceaccount:web:dashboard","system:serviceaccount:web:openapi"]',
        "groups": '["dashboard"]',
        "inClusterUser": "'system:serviceaccount:' + request.namespace + ':default'",
    }


@pytest.mark.parametrize(
    ("enforcement", "actions"), [("deny", ["Deny"]), ("warn", ["Warn", "Audit"])]
)
def test_the_policy_only_warns_while_enforcement_is_warn(
    enforcement: str, actions: list[str]
) -> None:
    objects = render(
        {**ACCESS, "submitterAccess.admissionPolicy": True, "enforcement": enforcement}
    )
    assert (
        one(objects, "ValidatingAdmissionPolicyBinding", "elb-gate-search-jobs")["spec"][
            "validationActions"
        ]
        == actions
    )


@pytest.mark.parametrize("value", ["submitterAccess.rbac", "submitterAccess.admissionPolicy"])
def test_restricting_submitters_without_naming_them_is_refused(value: str) -> None:
    with pytest.raises(
        ChartError,
        match="submitterAccess: list the submit paths' users and groups in submitters first",
    ):
        render({value: True})


# -- webhook.clientAuth ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["verify", "require"])
def test_client_auth_mounts_the_ca_and_sets_the_webhook_settings(mode: str) -> None:
    objects = render(
        {
            "webhook.clientAuth": {
                "mode": mode,
                "caBundle": CA,
                "names": ["kube-apiserver-webhook-client", "front-proxy"],
            }
        }
    )
    settings = _settings(objects)
    assert settings["ELB_GATE_CLIENT_AUTH"] == mode
    assert settings["ELB_GATE_CLIENT_NAMES"] == "kube-apiserver-webhook-client,front-proxy"
    assert one(objects, "ConfigMap", "elb-gate-webhook-client-ca")["data"]["ca.crt"] == CA
    pod = _webhook_pod(objects)
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "client-ca")
    assert settings["ELB_GATE_CLIENT_CA_FILE"] == mount["mountPath"] + "/ca.crt"
    assert {"name": "client-ca", "configMap": {"name": "elb-gate-webhook-client-ca"}} in pod[
        "volumes"
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"mode": "verify", "caBundle": "", "names": ["x"]},
            "webhook.clientAuth.mode verify needs caBundle",
        ),
        (
            {"mode": "require", "caBundle": CA, "names": []},
            "webhook.clientAuth.mode require needs caBundle",
        ),
        (
            {"mode": "mtls", "caBundle": CA, "names": ["x"]},
            "at '/webhook/clientAuth/mode': value must be one of 'off', 'verify', 'require'",
        ),
    ],
)
def test_an_incomplete_client_auth_is_refused(value: dict[str, Any], message: str) -> None:
    with pytest.raises(ChartError, match=message):
        render({"webhook.clientAuth": value})


def test_a_bare_yaml_off_is_off() -> None:
    objects = render({"webhook.clientAuth.mode": False})
    assert "ELB_GATE_CLIENT_AUTH" not in _settings(objects)


# -- networkPolicy.admissionFrom ------------------------------------------------------------

KONNECTIVITY = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"app": "konnectivity-agent"}},
}


def test_admission_from_keeps_port_8443_to_the_listed_peers_only() -> None:
    peers = [KONNECTIVITY, {"ipBlock": {"cidr": "10.1.2.0/28"}}]
    objects = render({"networkPolicy.admissionFrom": peers})
    ingress = one(objects, "NetworkPolicy", "elb-gate-webhook")["spec"]["ingress"]
    assert ingress[0] == {"ports": [{"port": 8443, "protocol": "TCP"}], "from": peers}
    assert ingress[1]["ports"] == [{"port": 9090, "protocol": "TCP"}]  # metrics unchanged

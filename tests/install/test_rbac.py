"""RBAC grants exactly the API calls the code makes: nothing missing (a call
would fail with 403 in production only) and nothing more (least privilege).

The calls are found by reading the source (AST) of webhook/ and controller/:
every call through ``elbgate.kube.api`` (``api.get(path(LEASES, ns, name))``,
``api.merge_patch(...)``, ``api.delete(...)``, the shared reads in
``elbgate.kube.reads``, and the controller's watches declared as ``WatchSpec``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from elbgate.names import (
    ADMISSION_READY_LEASE,
    ADMISSION_RECORD_CONFIGMAP,
    DB_MEMORY_CONFIGMAP,
    LIVENESS_CONFIGMAP,
    TURNS_CONFIGMAP,
)
from elbgate.settings import ControllerSettings, RuleSettings
from tests.install.rendering import REPO, Obj, one, select

Grant = tuple[str, str]  # (resource, verb)

METHOD_VERBS = {
    "get": "get",
    "get_or_none": "get",
    "list_objects": "list",
    "create": "create",
    "replace": "update",
    "merge_patch": "patch",
    "delete": "delete",
    "watch": "watch",
}
HTTP_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
KINDS = {
    "LEASES": "leases",
    "JOBS": "jobs",
    "PODS": "pods",
    "CONFIGMAPS": "configmaps",
    "EVENTS": "events",
    "NODES": "nodes",
    "SECRETS": "secrets",
    "ENDPOINTSLICES": "endpointslices",
    "CLUSTERROLES": "clusterroles",
    "VALIDATING_WEBHOOK_CONFIGURATIONS": "validatingwebhookconfigurations",
    "MUTATING_WEBHOOK_CONFIGURATIONS": "mutatingwebhookconfigurations",
}
CLUSTER_SCOPED = {"nodes"}
WEBHOOK_CONFIGURATIONS = {
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "clusterroles",
}
"""Cluster-scoped too, granted by name (elb-gate's own two) with managed certificates."""
"""Resources with no namespace: granted through the one ClusterRoleBinding."""
SHARED_READS = {
    "list_unfinished_search_jobs": {("jobs", "list")},
    "get_submit_lease": {("leases", "get")},
}
OWN_NAMESPACE_MODULES = {
    "leader.py": "leader",
    "cluster_view.py": "db-memory",
    "certificates.py": "certificates",
    "tls.py": "certificates",
    "registration.py": "registration",
}
"""Modules whose namespaced calls are in elb-gate's own namespace (elb-system): the
controller's leader Lease, the webhook's database memory ConfigMap."""

# The table the manifests must match, per component and scope. Built from the
# contract and narrowed to what the code does; test_the_table_is_what_the_code_calls
# keeps it honest.
EXPECTED: dict[tuple[str, str], set[Grant]] = {
    ("webhook", "gated"): {
        ("leases", "get"),
        ("leases", "create"),  # the readiness key, elb-gate-admission
        ("leases", "patch"),  # that one Lease only (resourceNames)
        ("jobs", "get"),
        ("jobs", "list"),
        ("jobs", "watch"),  # the census watch (webhook.censusRead: watch)
        ("jobs", "patch"),  # its fence Job only (resourceNames)
        ("configmaps", "get"),
        ("configmaps", "create"),
        ("configmaps", "update"),
    },
    ("controller", "gated"): {
        ("leases", "list"),
        ("leases", "watch"),
        ("leases", "patch"),
        ("jobs", "list"),
        ("jobs", "watch"),
        ("jobs", "patch"),
        ("jobs", "delete"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("events", "create"),
        ("configmaps", "create"),
        ("configmaps", "list"),
        ("configmaps", "watch"),
        ("configmaps", "patch"),
    },
    ("controller", "leader"): {("leases", "get"), ("leases", "create"), ("leases", "update")},
    ("controller", "cluster"): {("nodes", "list"), ("nodes", "watch")},
    ("controller", "webhook-configurations"): {
        (kind, verb)
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
        for verb in ("get", "update", "create", "delete")
    }
    | {("clusterroles", "get")},
    ("controller", "registration"): {
        ("configmaps", "get"),
        ("configmaps", "delete"),
        ("endpointslices", "list"),
    },
    ("controller", "certificates"): {
        ("secrets", "get"),
        ("secrets", "create"),
        ("secrets", "update"),
    },
    ("webhook", "certificates"): {("secrets", "get")},
    ("webhook", "cluster"): {("nodes", "list"), ("nodes", "watch")},
    ("webhook", "db-memory"): {("configmaps", "list"), ("configmaps", "watch")},
}


# --- reading the code ----------------------------------------------------------------


def _path_call(node: ast.AST) -> tuple[str, bool] | None:
    """``path(KIND, ns[, name])`` → (resource, names one object)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "path"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id in KINDS
    ):
        named = len(node.args) >= 3 or any(k.arg == "name" for k in node.keywords)
        return KINDS[node.args[0].id], named
    return None


def _target_key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


class Unresolved(Exception):
    pass


def calls_in(source: Path) -> Iterator[Grant]:
    """Every (resource, verb) one module asks of the API server."""
    tree = ast.parse(source.read_text())
    assigned: dict[str, tuple[str, bool]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and (found := _path_call(node.value)):
            for target in node.targets:
                if key := _target_key(target):
                    assigned[key] = found
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in SHARED_READS:
            yield from SHARED_READS[func.id]
        if isinstance(func, ast.Name) and func.id == "WatchSpec":
            for arg in node.args:
                if found := _path_call(arg):
                    yield (found[0], "list")
                    yield (found[0], "watch")
        if not isinstance(func, ast.Attribute):
            continue
        if not (_target_key(func.value) or "").endswith("api"):
            continue
        method = func.attr
        args = list(node.args)
        if method == "request":
            http, url = args[0], args[1]
            assert isinstance(http, ast.Constant), ast.unparse(node)
            verb = HTTP_VERBS[str(http.value)]
        elif method in METHOD_VERBS:
            verb, url = METHOD_VERBS[method], args[0]
        else:
            continue
        if isinstance(url, ast.Constant) and str(url.value).startswith("/version"):
            continue  # non-resource URL, readable by every authenticated user
        if isinstance(url, ast.Attribute) and url.attr == "url_path":
            continue  # the informer: what it lists/watches is declared by WatchSpec
        found = _path_call(url) or assigned.get(_target_key(url) or "")
        if found is None:
            raise Unresolved(f"{source}: cannot tell what {ast.unparse(node)} calls")
        resource, named = found
        if verb == "get" and not named:
            verb = "list"
        yield resource, verb


def used_by_code() -> dict[tuple[str, str], set[Grant]]:
    used: dict[tuple[str, str], set[Grant]] = {}
    for component in ("webhook", "controller"):
        for module in sorted((REPO / component).glob("*.py")):
            scope = OWN_NAMESPACE_MODULES.get(module.name, "gated")
            for resource, verb in calls_in(module):
                where = (
                    "cluster"
                    if resource in CLUSTER_SCOPED
                    else "webhook-configurations"
                    if resource in WEBHOOK_CONFIGURATIONS
                    else scope
                )
                used.setdefault((component, where), set()).add((resource, verb))
    return used


# --- reading the manifests ------------------------------------------------------------


def granted(rules: list[Obj]) -> set[Grant]:
    out = set()
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        out |= {(r, v) for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_the_table_is_what_the_code_calls() -> None:
    assert used_by_code() == EXPECTED


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_the_gated_namespace_role_grants_exactly_the_table(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    role = one(rendered["base"], "ClusterRole", f"elb-gate-{component}")
    assert granted(role["rules"]) == EXPECTED[(component, "gated")]


def test_the_leader_role_grants_exactly_the_table_on_the_leader_lease_only(
    rendered: dict[str, list[Obj]],
) -> None:
    role = one(rendered["base"], "Role", "elb-gate-controller-leader")
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert role["metadata"]["namespace"] == "elb-system"
    assert granted(role["rules"]) == EXPECTED[("controller", "leader")]
    assert all(r["resourceNames"] == [ControllerSettings().leader_lease_name] for r in named)
    assert {v for r in role["rules"] if "resourceNames" not in r for v in r["verbs"]} == {"create"}


def test_configmap_access_is_limited_to_the_liveness_configmap_and_reading_the_record(
    rendered: dict[str, list[Obj]],
) -> None:
    role = one(rendered["base"], "ClusterRole", "elb-gate-controller")
    rules = [r for r in role["rules"] if r["resources"] == ["configmaps"]]
    unnamed = [v for r in rules if "resourceNames" not in r for v in r["verbs"]]
    named = [(r["resourceNames"], r["verbs"]) for r in rules if "resourceNames" in r]
    assert unnamed == ["create"] and named == [
        ([LIVENESS_CONFIGMAP], ["list", "watch", "patch"]),
        ([ADMISSION_RECORD_CONFIGMAP], ["list", "watch"]),
    ]
    # list/watch limited by name only qualify with this field selector: the informer sends it.
    source = (REPO / "controller" / "server.py").read_text()
    assert 'field_selector=f"metadata.name={LIVENESS_CONFIGMAP}"' in source
    assert 'field_selector=f"metadata.name={ADMISSION_RECORD_CONFIGMAP}"' in source


def test_the_webhook_writes_only_its_admission_and_turn_records_except_create(
    rendered: dict[str, list[Obj]],
) -> None:
    role = one(rendered["base"], "ClusterRole", "elb-gate-webhook")
    rules = [r for r in role["rules"] if r["resources"] == ["configmaps"]]
    unnamed = [v for r in rules if "resourceNames" not in r for v in r["verbs"]]
    named = [(r["resourceNames"], r["verbs"]) for r in rules if "resourceNames" in r]
    assert unnamed == ["create"] and named == [
        ([ADMISSION_RECORD_CONFIGMAP, TURNS_CONFIGMAP], ["get", "update"])
    ]


def test_the_webhook_writes_only_the_readiness_key_lease_except_create(
    rendered: dict[str, list[Obj]],
) -> None:
    """The webhook reads the submit Lease and never writes it: its Lease writes are the
    readiness key's create and renewal, the renewal narrowed to that Lease by name."""
    role = one(rendered["base"], "ClusterRole", "elb-gate-webhook")
    rules = [r for r in role["rules"] if r["resources"] == ["leases"]]
    unnamed = sorted(v for r in rules if "resourceNames" not in r for v in r["verbs"])
    named = [(r["resourceNames"], r["verbs"]) for r in rules if "resourceNames" in r]
    assert unnamed == ["create", "get"] and named == [([ADMISSION_READY_LEASE], ["patch"])]


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_the_node_roles_grant_exactly_the_table_and_are_the_only_cluster_wide_bindings(
    rendered: dict[str, list[Obj]], component: str
) -> None:
    name = f"elb-gate-{component}-nodes"
    role = one(rendered["base"], "ClusterRole", name)
    assert (
        granted(role["rules"])
        == EXPECTED[(component, "cluster")]
        == {
            ("nodes", "list"),
            ("nodes", "watch"),
        }
    )
    bindings = {b["roleRef"]["name"]: b for b in select(rendered["base"], "ClusterRoleBinding")}
    assert set(bindings) == {"elb-gate-webhook-nodes", "elb-gate-controller-nodes"}
    (subject,) = bindings[name]["subjects"]
    assert (subject["name"], subject["namespace"]) == (f"elb-gate-{component}", "elb-system")


def test_managed_certificates_grant_exactly_the_table_on_the_named_objects_only() -> None:
    from tests.install.chart import render

    objects = render({})  # the chart's default: certificates.source managed
    secret_names = ["elb-gate-webhook-ca", "elb-gate-webhook-tls"]
    ctl = one(objects, "Role", "elb-gate-controller-certificates")
    assert granted(ctl["rules"]) == EXPECTED[("controller", "certificates")]
    unnamed = [v for r in ctl["rules"] if "resourceNames" not in r for v in r["verbs"]]
    assert unnamed == ["create"]  # RBAC cannot limit create by name
    assert [r["resourceNames"] for r in ctl["rules"] if "resourceNames" in r] == [secret_names]
    hooks = one(objects, "ClusterRole", "elb-gate-controller-webhook-configurations")
    assert granted(hooks["rules"]) == {
        (k, v)
        for k, v in EXPECTED[("controller", "webhook-configurations")]
        if v in ("get", "update") and k != "clusterroles"
    }
    assert all(r["resourceNames"] == ["elb-gate"] for r in hooks["rules"])
    web = one(objects, "Role", "elb-gate-webhook-certificate")
    assert granted(web["rules"]) == EXPECTED[("webhook", "certificates")]
    assert all(r["resourceNames"] == ["elb-gate-webhook-tls"] for r in web["rules"])
    for name, sa in (
        ("elb-gate-controller-certificates", "elb-gate-controller"),
        ("elb-gate-webhook-certificate", "elb-gate-webhook"),
    ):
        (subject,) = one(objects, "RoleBinding", name)["subjects"]
        assert subject["name"] == sa
    (subject,) = one(objects, "ClusterRoleBinding", "elb-gate-controller-webhook-configurations")[
        "subjects"
    ]
    assert subject["name"] == "elb-gate-controller"


def test_the_controllers_node_and_pod_watches_name_their_one_object() -> None:
    # Never a list of every Pod or Node: the holder's pod and its node, by name.
    source = (REPO / "controller" / "holder_watch.py").read_text()
    assert source.count('field_selector=f"metadata.name={name}"') == 2


def test_the_webhook_reads_only_the_database_memory_configmap_in_its_namespace(
    rendered: dict[str, list[Obj]],
) -> None:
    role = one(rendered["base"], "Role", "elb-gate-webhook-db-memory")
    assert role["metadata"]["namespace"] == "elb-system"
    assert granted(role["rules"]) == EXPECTED[("webhook", "db-memory")]
    assert all(r["resourceNames"] == [DB_MEMORY_CONFIGMAP] for r in role["rules"])
    assert RuleSettings().db_memory_configmap == DB_MEMORY_CONFIGMAP
    # list/watch limited by name qualify with this field selector: the watch sends it.
    assert (
        'field_selector=f"metadata.name={name}"'
        in (REPO / "webhook" / "cluster_view.py").read_text()
    )


def test_roles_are_bound_per_namespace_and_never_cluster_wide(
    rendered: dict[str, list[Obj]],
) -> None:
    for target, objects in rendered.items():
        cluster_wide = {b["roleRef"]["name"] for b in select(objects, "ClusterRoleBinding")}
        assert cluster_wide <= {"elb-gate-controller-nodes", "elb-gate-webhook-nodes"}, target
        for rb in select(objects, "RoleBinding"):
            (subject,) = rb["subjects"]
            assert rb["roleRef"]["name"] != "cluster-admin"
            assert subject["namespace"] == "elb-system"
            role = rb["roleRef"]["name"]
            assert subject["name"] == role.removesuffix("-leader").removesuffix("-db-memory")


def test_the_webhook_can_write_only_its_admission_record_readiness_key_and_census_fence() -> None:
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    webhook = {
        (r, v)
        for (component, _), grants in EXPECTED.items()
        if component == "webhook"
        for r, v in grants
    }
    assert {(r, v) for r, v in webhook if v in writes} == {
        ("configmaps", "create"),
        ("configmaps", "update"),
        ("leases", "create"),
        ("leases", "patch"),
        ("jobs", "patch"),
    }


def test_the_webhook_patches_no_job_but_each_namespaces_census_fence(
    rendered: dict[str, list[Obj]],
) -> None:
    checked = 0
    for target, objects in rendered.items():
        roles = select(objects, "ClusterRole", "elb-gate-webhook")
        if not roles:
            continue  # a target without the base (the monitoring objects alone)
        (role,) = roles
        checked += 1
        patches = [r for r in role["rules"] if "jobs" in r["resources"] and "patch" in r["verbs"]]
        (rule,) = patches
        fences = {
            job["metadata"]["name"]
            for job in select(objects, "Job")
            if job["metadata"]["labels"]["app"] == "elb-gate-census-fence"
        }
        assert rule["verbs"] == ["patch"] and rule["resourceNames"] == sorted(fences), target
    assert checked >= 3


def test_registration_grants_exactly_the_table_on_the_named_objects_but_create_and_list() -> None:
    from tests.install.chart import render

    objects = render({})  # the chart's default: webhook.registration controller
    role = one(objects, "Role", "elb-gate-controller-registration")
    assert granted(role["rules"]) == EXPECTED[("controller", "registration")]
    for rule in role["rules"]:
        if rule["resources"] == ["configmaps"]:
            assert rule["resourceNames"] == ["elb-gate-webhook-configurations"]
        else:  # a list by label selector cannot be limited by name
            assert rule["verbs"] == ["list"] and "resourceNames" not in rule
    cluster = one(objects, "ClusterRole", "elb-gate-controller-registration")
    unnamed = {v for r in cluster["rules"] if "resourceNames" not in r for v in r["verbs"]}
    assert unnamed == {"create"}  # RBAC cannot limit create by name
    named = {
        (tuple(r["resources"]), tuple(r["resourceNames"]))
        for r in cluster["rules"]
        if "resourceNames" in r
    }
    assert named == {
        (("validatingwebhookconfigurations", "mutatingwebhookconfigurations"), ("elb-gate",)),
        (("clusterroles",), ("elb-gate-webhook",)),
    }
    both = granted(cluster["rules"]) | granted(
        one(objects, "ClusterRole", "elb-gate-controller-webhook-configurations")["rules"]
    )
    assert both == EXPECTED[("controller", "webhook-configurations")]

"""The exact lines the pinned kubectl prints against the real API server, for the
answers the submit paths act on.

The OpenAPI service reads kubectl's stderr to tell "busy" (AlreadyExists, a
Conflict) from an outage (anything else), so these lines are part of the
protocol: a kubectl release that changed them would change what that client
does. Each test runs the Lease commands that client runs (``-f -``, so the
source is ``"STDIN"``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.controlplane import ControlPlane

pytestmark = pytest.mark.kubectl

CONFLICT = (
    'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has '
    "been modified; please apply your changes to the latest version and try again"
)


@pytest.fixture(scope="module")
def ns(control_plane: ControlPlane) -> str:
    """A namespace where alice may do anything with Leases (and bob nothing)."""
    name = control_plane.new_namespace("kubectl-lines")
    control_plane.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "leases", "namespace": name},
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}
            ],
        }
    )
    control_plane.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "leases", "namespace": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}
            ],
        }
    )
    return name


def lease(
    name: str,
    namespace: str,
    holder: str = "a",
    rv: str | None = None,
    renew: str | None = None,
) -> str:
    meta: dict[str, str] = {"name": name, "namespace": namespace}
    if rv:
        meta["resourceVersion"] = rv
    spec: dict[str, object] = {"holderIdentity": holder, "leaseDurationSeconds": 900}
    if renew:
        spec["renewTime"] = renew
    return json.dumps(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
    )


def run(cp: ControlPlane, user: str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = cp.kubectl(user, *args, input=input)
    return result.returncode, result.stdout.strip(), result.stderr.strip()


def test_a_replace_with_a_stale_resource_version_prints_the_conflict(
    control_plane: ControlPlane, ns: str
) -> None:
    cp = control_plane
    assert run(cp, "alice", "create", "-f", "-", input=lease("stale", ns))[0] == 0
    rv = cp.admin.get("leases", ns, "stale")["metadata"]["resourceVersion"]
    cp.admin.patch("leases", ns, "stale", {"spec": {"holderIdentity": "b"}})
    assert run(cp, "alice", "replace", "-f", "-", input=lease("stale", ns, "c", rv)) == (
        1,
        "",
        'Error from server (Conflict): error when replacing "STDIN": '
        + CONFLICT.format(name="stale"),
    )


def test_creating_twice_prints_already_exists(control_plane: ControlPlane, ns: str) -> None:
    cp = control_plane
    assert run(cp, "alice", "create", "-f", "-", input=lease("twice", ns)) == (
        0,
        "lease.coordination.k8s.io/twice created",
        "",
    )
    assert run(cp, "alice", "create", "-f", "-", input=lease("twice", ns)) == (
        1,
        "",
        'Error from server (AlreadyExists): error when creating "STDIN": '
        'leases.coordination.k8s.io "twice" already exists',
    )


def test_getting_a_missing_lease_prints_not_found(control_plane: ControlPlane, ns: str) -> None:
    assert run(control_plane, "alice", "-n", ns, "get", "lease", "ghost") == (
        1,
        "",
        'Error from server (NotFound): leases.coordination.k8s.io "ghost" not found',
    )


def test_ignore_not_found_prints_nothing_for_a_missing_lease(
    control_plane: ControlPlane, ns: str
) -> None:
    args = ("-n", ns, "get", "lease", "ghost", "--ignore-not-found", "-o", "json")
    assert run(control_plane, "alice", *args) == (0, "", "")


def test_a_replace_of_a_missing_lease_creates_it_and_prints_replaced(
    control_plane: ControlPlane, ns: str
) -> None:
    # The OpenAPI client's code expects "not found" here; the API server turns an
    # update of a missing Lease into a create, whatever resourceVersion it carries.
    assert run(control_plane, "alice", "replace", "-f", "-", input=lease("gone", ns, rv="1")) == (
        0,
        "lease.coordination.k8s.io/gone replaced",
        "",
    )
    assert control_plane.admin.get("leases", ns, "gone")["spec"]["holderIdentity"] == "a"


def test_a_replace_without_resource_version_is_unconditional(
    control_plane: ControlPlane, ns: str
) -> None:
    # kubectl fills in the stored resourceVersion itself, so this is not the
    # API server's 422 for an unconditional update: it overwrites whatever is there.
    cp = control_plane
    assert run(cp, "alice", "create", "-f", "-", input=lease("blind", ns))[0] == 0
    cp.admin.patch("leases", ns, "blind", {"spec": {"holderIdentity": "b"}})
    assert run(cp, "alice", "replace", "-f", "-", input=lease("blind", ns, "c")) == (
        0,
        "lease.coordination.k8s.io/blind replaced",
        "",
    )
    assert cp.admin.get("leases", ns, "blind")["spec"]["holderIdentity"] == "c"


def test_a_microtime_without_six_fractional_digits_prints_bad_request(
    control_plane: ControlPlane, ns: str
) -> None:
    body = lease("millis", ns, renew="2026-11-30T12:00:00.123Z")
    assert run(control_plane, "alice", "create", "-f", "-", input=body) == (
        1,
        "",
        'Error from server (BadRequest): error when creating "STDIN": Lease in version "v1" '
        'cannot be handled as a Lease: parsing time "2026-11-30T12:00:00.123Z" as '
        '"2006-01-02T15:04:05.000000Z07:00": cannot parse ".123Z" as ".000000"',
    )


def test_missing_rights_print_forbidden_for_reads_and_writes(
    control_plane: ControlPlane, ns: str
) -> None:
    cp = control_plane
    assert run(cp, "bob", "-n", ns, "get", "lease", "any") == (
        1,
        "",
        'Error from server (Forbidden): leases.coordination.k8s.io "any" is forbidden: User '
        f'"bob" cannot get resource "leases" in API group "coordination.k8s.io" in the '
        f'namespace "{ns}"',
    )
    assert run(cp, "bob", "create", "-f", "-", input=lease("any", ns)) == (
        1,
        "",
        'Error from server (Forbidden): error when creating "STDIN": '
        "leases.coordination.k8s.io is forbidden: User "
        f'"bob" cannot create resource "leases" in API group "coordination.k8s.io" in the '
        f'namespace "{ns}"',
    )


def test_create_in_a_missing_namespace_prints_namespace_not_found(
    control_plane: ControlPlane,
) -> None:
    assert run(control_plane, "admin", "create", "-f", "-", input=lease("x", "nowhere")) == (
        1,
        "",
        'Error from server (NotFound): error when creating "STDIN": namespaces "nowhere" not found',
    )


def test_an_invalid_name_is_refused_before_anything_else(
    control_plane: ControlPlane, ns: str
) -> None:
    code, out, err = run(control_plane, "alice", "create", "-f", "-", input=lease("Bad_Name", ns))
    assert (code, out) == (1, "")
    assert err.startswith(
        'The Lease "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
    )


def test_the_submit_path_round_trip_create_get_replace_works(
    control_plane: ControlPlane, ns: str
) -> None:
    cp = control_plane
    name = "elb-blast-submit-round-trip"
    assert run(cp, "alice", "create", "-f", "-", input=lease(name, ns))[0] == 0
    code, out, _ = run(
        cp, "alice", "-n", ns, "get", "lease", name, "--ignore-not-found", "-o", "json"
    )
    got = json.loads(out)
    assert code == 0 and got["kind"] == "Lease" and got["spec"]["holderIdentity"] == "a"
    got["spec"]["holderIdentity"] = ""
    code, out, err = run(cp, "alice", "replace", "-f", "-", "-o", "json", input=json.dumps(got))
    assert code == 0, err
    assert json.loads(out)["spec"]["holderIdentity"] == ""


def test_apply_label_patch_and_delete_print_what_they_did(
    control_plane: ControlPlane, ns: str
) -> None:
    cp = control_plane
    lines = [
        run(cp, "alice", "apply", "-f", "-", input=lease("applied", ns)),
        run(cp, "alice", "apply", "-f", "-", input=lease("applied", ns, "b")),
        run(cp, "alice", "-n", ns, "label", "lease", "applied", "app=x"),
        run(
            cp,
            "alice",
            "-n",
            ns,
            "patch",
            "lease",
            "applied",
            "--type=merge",
            "-p",
            '{"spec":{"leaseDurationSeconds":60}}',
        ),
        run(cp, "alice", "-n", ns, "get", "leases", "-l", "app=x", "-o", "name"),
        run(cp, "alice", "-n", ns, "delete", "lease", "applied"),
        run(cp, "alice", "-n", ns, "delete", "lease", "applied"),
    ]
    assert lines == [
        (0, "lease.coordination.k8s.io/applied created", ""),
        (0, "lease.coordination.k8s.io/applied configured", ""),
        (0, "lease.coordination.k8s.io/applied labeled", ""),
        (0, "lease.coordination.k8s.io/applied patched", ""),
        (0, "lease.coordination.k8s.io/applied", ""),
        (0, f'lease.coordination.k8s.io "applied" deleted from {ns} namespace', ""),
        (1, "", 'Error from server (NotFound): leases.coordination.k8s.io "applied" not found'),
    ]


def test_an_unknown_token_prints_you_must_be_logged_in(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    config = Path(control_plane.kubeconfig("alice")).read_text()
    bogus = tmp_path / "kubeconfig"
    bogus.write_text(config.replace(control_plane.token("alice"), "bogus"))
    result = control_plane.kubectl("alice", "get", "leases", kubeconfig=str(bogus))
    assert (result.returncode, result.stderr.strip()) == (
        1,
        "error: You must be logged in to the server (Unauthorized)",
    )

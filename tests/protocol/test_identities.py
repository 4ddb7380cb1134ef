"""Submitter identities: one submit path, several credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from elbgate.identities import IdentityConfigError, SubmitterIdentities

DOC = {
    "submitters": [
        {"name": "dashboard", "holderPrefix": "dashboard-", "users": ["dash-lease", "dash-apply"]},
        {"name": "openapi", "holderPrefix": "openapi-", "groups": ["system:serviceaccounts:blast"]},
        {"name": "dashboard-batch", "holderPrefix": "dashboard-batch-", "users": ["batch"]},
    ]
}
IDS = SubmitterIdentities.parse(DOC)
DASH = "dashboard-0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("holder", "user", "groups", "submitter"),
    [
        (DASH, "dash-apply", [], "dashboard"),
        (DASH, "dash-lease", [], "dashboard"),
        (DASH, "mallory", [], None),
        (DASH, "mallory", ["system:serviceaccounts:blast"], None),
        (
            "openapi-1",
            "system:serviceaccount:blast:api",
            ["system:serviceaccounts:blast"],
            "openapi",
        ),
        ("openapi-1", "dash-apply", [], None),
        ("dashboard-batch-1", "batch", [], "dashboard-batch"),  # longest prefix wins
        ("dashboard-batch-1", "dash-apply", [], None),
        ("cli-1", "dash-apply", [], None),
    ],
)
def test_same_submitter(holder: str, user: str, groups: list[str], submitter: str | None) -> None:
    found = IDS.same_submitter(holder, user, groups)
    assert (found.name if found else None) == submitter


def test_no_config_means_no_submitters() -> None:
    assert SubmitterIdentities.load("").same_submitter(DASH, "dash-apply", []) is None
    assert SubmitterIdentities.parse(None).submitters == ()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a mapping"),
        ({"submitters": "x"}, "expected a mapping"),
        ({"submitters": [1]}, "submitters[0] is not a mapping"),
        ({"submitters": [{"holderPrefix": "a-", "users": ["u"]}]}, "submitters[0].name"),
        ({"submitters": [{"name": "a", "users": ["u"]}]}, "submitters[0].holderPrefix"),
        ({"submitters": [{"name": "a", "holderPrefix": "a-"}]}, "needs 'users' and/or 'groups'"),
        ({"submitters": [{"name": "a", "holderPrefix": "a-", "users": "u"}]}, "lists of strings"),
    ],
)
def test_malformed_config_is_refused_with_the_entry_named(doc: object, message: str) -> None:
    with pytest.raises(IdentityConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SubmitterIdentities.parse(doc)


def test_load_reads_yaml_and_names_the_file_on_error(tmp_path: Path) -> None:
    good = tmp_path / "ids.yaml"
    good.write_text(
        "submitters:\n  - name: dashboard\n    holderPrefix: dashboard-\n    users: [dash-apply]\n"
    )
    assert SubmitterIdentities.load(str(good)).submitters[0].name == "dashboard"
    bad = tmp_path / "bad.yaml"
    bad.write_text("submitters: [ {name: x}\n")
    with pytest.raises(IdentityConfigError, match=r"bad\.yaml is not valid YAML"):
        SubmitterIdentities.load(str(bad))
    with pytest.raises(IdentityConfigError, match="cannot read"):
        SubmitterIdentities.load(str(tmp_path / "missing.yaml"))

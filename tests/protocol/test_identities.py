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


# -- split holders ------------------------------------------------------------------------

SPLIT = "dashboard-split-0123456789abcdef0123456789abcdef"


def test_by_default_the_dashboards_users_hold_split_shards() -> None:
    """No ``splitHolders`` key: ``dashboard-split-`` for the users of submitter dashboard."""
    assert IDS.split_holder(SPLIT, "dash-lease") is not None
    assert IDS.split_holder(SPLIT, "dash-apply") is not None
    assert IDS.split_holder(SPLIT, "mallory") is None
    assert IDS.split_holder(SPLIT, "") is None  # unstamped: the holder string proves nothing
    assert IDS.split_holder(DASH, "dash-lease") is None  # a regular dashboard submit
    assert IDS.split_holder("openapi-split-1", "system:serviceaccount:blast:api") is None


def test_without_a_dashboard_submitter_the_default_grants_nothing() -> None:
    for ids in (SubmitterIdentities.parse(None), SubmitterIdentities.load("")):
        assert ids.split_holders == ()
        assert ids.split_holder(SPLIT, "dashboard-lease") is None


def test_groups_alone_grant_no_split_shard() -> None:
    """The stamp records a username: a dashboard mapped by group only gets no default."""
    ids = SubmitterIdentities.parse(
        {"submitters": [{"name": "dashboard", "holderPrefix": "dashboard-", "groups": ["d"]}]}
    )
    assert ids.split_holders == ()


def test_explicit_split_holders_replace_the_default() -> None:
    doc = {
        **DOC,
        "splitHolders": [
            {"holderPrefix": "dashboard-split-", "users": ["dash-lease"]},
            {"holderPrefix": "batch-split-", "submitter": "dashboard-batch", "users": ["x"]},
        ],
    }
    ids = SubmitterIdentities.parse(doc)
    assert ids.split_holder(SPLIT, "dash-lease") is not None
    assert ids.split_holder(SPLIT, "dash-apply") is None  # not listed any more
    found = ids.split_holder("batch-split-1", "batch")
    assert found is not None and found.users == {"batch", "x"}
    assert SubmitterIdentities.parse({**DOC, "splitHolders": []}).split_holders == ()
    hint = ids.split_prefix(SPLIT)
    assert hint is not None and hint.holder_prefix == "dashboard-split-"


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ("x", "'splitHolders' must be a list"),
        ([1], "splitHolders[0] is not a mapping"),
        ([{"users": ["u"]}], "splitHolders[0].holderPrefix"),
        ([{"holderPrefix": "s-", "users": "u"}], "splitHolders[0].users must be a list"),
        ([{"holderPrefix": "s-", "submitter": "nobody"}], "'nobody' is not in 'submitters'"),
        ([{"holderPrefix": "s-", "submitter": "openapi"}], "allows no user"),
        ([{"holderPrefix": "s-", "groups": ["g"]}], "only 'users'"),
    ],
)
def test_malformed_split_holders_are_refused(splits: object, message: str) -> None:
    with pytest.raises(IdentityConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SubmitterIdentities.parse({**DOC, "splitHolders": splits})

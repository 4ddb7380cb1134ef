"""The managed-certificate planner as values: what it decides at each point of a
serving-certificate renewal and a CA rotation, and what the caBundle holds meanwhile.

The ordering asserted here is the no-x509-window rule (controller/certificates.py):
a new CA is published before anything it signed is served, and an old CA leaves the
caBundle only after the serving certificate of its successor has been in service
for the overlap."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from certs import builder
from controller.certificates import Action, Observed, Policy, decide, digest, pem

T0 = dt.datetime(2031, 3, 1, 12, 0, tzinfo=dt.UTC)
NAMES = builder.service_dns_names("elb-gate-webhook", "elb-system")
POLICY = Policy(
    ca_lifetime=dt.timedelta(hours=120),
    serving_lifetime=dt.timedelta(hours=30),
    renew_fraction=0.5,
    overlap=dt.timedelta(minutes=5),
)
KINDS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


def ca_at(t: dt.datetime) -> builder.KeyPair:
    return builder.new_ca(t, lifetime=POLICY.ca_lifetime)


def leaf_at(ca: builder.KeyPair, t: dt.datetime, names: list[str] = NAMES) -> builder.KeyPair:
    return builder.new_serving(ca, names, t, lifetime=POLICY.serving_lifetime)


def observed(
    cas: list[builder.KeyPair],
    leaf: builder.KeyPair | None,
    *,
    bundle: list[builder.KeyPair] | None = None,
    published_at: dt.datetime | None = None,
) -> Observed:
    """Stored state: the trusted set ``cas`` (last signs), ``leaf`` in the TLS Secret,
    every configuration's caBundle ``bundle`` (default: the trusted set), recorded
    as published at ``published_at``."""
    certs = tuple(c.cert for c in cas)
    shown = pem([c.cert for c in bundle]) if bundle is not None else pem(certs)
    return Observed(
        cas=certs,
        signer_key=cas[-1].key if cas else None,
        leaf=leaf.cert if leaf else None,
        leaf_key_matches=leaf is not None,
        bundles=dict.fromkeys(KINDS, shown),
        published=(digest(certs), published_at) if published_at else None,
    )


def test_nothing_stored_makes_a_ca_then_publishes_then_issues_at_once() -> None:
    assert decide(Observed(bundles=dict.fromkeys(KINDS, None)), NAMES, T0, POLICY).action is (
        Action.NEW_CA
    )
    ca = ca_at(T0)
    step = decide(observed([ca], None, bundle=[]), NAMES, T0, POLICY)
    assert step.action is Action.PUBLISH and step.trusted == (ca.cert,)
    assert decide(observed([ca], None), NAMES, T0, POLICY).action is Action.RECORD
    # No serving certificate at all: nothing served to protect, no overlap to wait.
    step = decide(observed([ca], None, published_at=T0), NAMES, T0, POLICY)
    assert step.action is Action.ISSUE and step.reason == "no serving certificate yet"


def test_with_nothing_registered_the_pair_is_issued_without_waiting() -> None:
    ca = ca_at(T0)
    obs = replace(observed([ca], None), bundles={})
    assert decide(obs, NAMES, T0, POLICY).action is Action.ISSUE


def test_a_valid_pair_is_kept_until_its_renewal_point() -> None:
    ca = ca_at(T0)
    leaf = leaf_at(ca, T0)
    obs = observed([ca], leaf, published_at=T0)
    step = decide(obs, NAMES, T0 + dt.timedelta(hours=1), POLICY)
    assert step.action is Action.KEEP
    assert step.at == T0 + dt.timedelta(hours=15)  # half of the serving lifetime


def test_the_serving_certificate_is_renewed_under_the_same_ca_with_no_wait() -> None:
    ca = ca_at(T0)
    leaf = leaf_at(ca, T0)
    at = T0 + dt.timedelta(hours=15)
    step = decide(observed([ca], leaf, published_at=at), NAMES, at, POLICY)
    assert step.action is Action.ISSUE and "renewal point" in step.reason
    assert step.trusted == (ca.cert,)  # the caBundle does not change


def test_changed_service_names_are_reissued() -> None:
    ca = ca_at(T0)
    leaf = leaf_at(ca, T0, names=builder.service_dns_names("elb-gate-webhook", "other"))
    step = decide(observed([ca], leaf, published_at=T0), NAMES, T0, POLICY)
    assert step.action is Action.ISSUE and "names differ" in step.reason


def test_a_ca_rotation_publishes_the_new_ca_before_serving_what_it_signs() -> None:
    old = ca_at(T0)
    t = T0 + dt.timedelta(hours=60)  # half the CA's life
    leaf = leaf_at(old, t - dt.timedelta(hours=1))
    # 1. past its renewal point, the CA gets a successor, appended (old still trusted).
    step = decide(observed([old], leaf, published_at=T0), NAMES, t, POLICY)
    assert step.action is Action.ADD_CA and step.trusted == (old.cert,)
    new = ca_at(t)
    # 2. the caBundle still holds the old CA alone: publish both, old first.
    step = decide(observed([old, new], leaf, bundle=[old], published_at=T0), NAMES, t, POLICY)
    assert step.action is Action.PUBLISH and step.trusted == (old.cert, new.cert)
    # 3. published, but not for the overlap yet: the old CA's leaf stays in service.
    step = decide(
        observed([old, new], leaf, published_at=t), NAMES, t + dt.timedelta(minutes=4), POLICY
    )
    assert step.action is Action.WAIT and step.at == t + POLICY.overlap
    assert "older CA" in step.reason
    # 4. after the overlap: a leaf signed by the new CA.
    t4 = t + POLICY.overlap
    step = decide(observed([old, new], leaf, published_at=t), NAMES, t4, POLICY)
    assert step.action is Action.ISSUE and step.trusted == (old.cert, new.cert)
    new_leaf = leaf_at(new, t4)
    # 5. both CAs stay trusted while Pods may still serve the old leaf...
    step = decide(
        observed([old, new], new_leaf, published_at=t), NAMES, t4 + dt.timedelta(minutes=1), POLICY
    )
    assert step.action is Action.WAIT and step.at == t4 + POLICY.overlap
    # 6. ...and the old one leaves only after the overlap; then the smaller set is published.
    step = decide(
        observed([old, new], new_leaf, published_at=t), NAMES, t4 + POLICY.overlap, POLICY
    )
    assert step.action is Action.DROP_OLD and step.trusted == (new.cert,)
    step = decide(
        observed([new], new_leaf, bundle=[old, new], published_at=t),
        NAMES,
        t4 + POLICY.overlap,
        POLICY,
    )
    assert step.action is Action.PUBLISH and step.trusted == (new.cert,)


def test_at_every_step_of_a_rotation_the_bundle_trusts_the_served_leaf() -> None:
    """Replay the planner's own steps on a simulated store and check the invariant at
    each point: the caBundle verifies the serving certificate."""
    policy = POLICY
    store: dict[str, object] = {"cas": [], "leaf": None, "bundle": [], "published": None}
    t = T0
    actions: list[Action] = []
    end = T0 + dt.timedelta(hours=200)  # across more than one CA lifetime
    while t < end:
        cas: list[builder.KeyPair] = store["cas"]  # type: ignore[assignment]
        leaf: builder.KeyPair | None = store["leaf"]  # type: ignore[assignment]
        bundle: list[builder.KeyPair] = store["bundle"]  # type: ignore[assignment]
        obs = observed(cas, leaf, bundle=bundle, published_at=store["published"])  # type: ignore[arg-type]
        if store["published"] and store.get("published_digest") != digest([c.cert for c in cas]):
            obs = replace(obs, published=None)
        step = decide(obs, NAMES, t, policy)
        actions.append(step.action)
        if step.action in (Action.NEW_CA, Action.ADD_CA):
            kept = [c for c in cas if c.cert in step.trusted]
            store["cas"] = [*kept, ca_at(t)]
        elif step.action in (Action.DROP_OLD, Action.PRUNE):
            store["cas"] = [c for c in cas if c.cert in step.trusted]
        elif step.action is Action.PUBLISH:
            store["bundle"] = list(cas)
            store["published"], store["published_digest"] = t, digest([c.cert for c in cas])
        elif step.action is Action.RECORD:
            store["published"], store["published_digest"] = t, digest([c.cert for c in cas])
        elif step.action is Action.ISSUE:
            store["leaf"] = leaf_at(cas[-1], t)
        else:
            t += dt.timedelta(minutes=1)
        served: builder.KeyPair | None = store["leaf"]  # type: ignore[assignment]
        shown: list[builder.KeyPair] = store["bundle"]  # type: ignore[assignment]
        if served is not None and shown:
            assert any(builder.issued_by(served.cert, c.cert) for c in shown), (t, actions[-5:])
            assert served.cert.not_valid_after_utc > t
    assert actions.count(Action.ADD_CA) >= 1 and actions.count(Action.DROP_OLD) >= 1
    assert actions.count(Action.ISSUE) >= 5


def test_expired_cas_are_pruned_and_an_expired_signer_is_replaced() -> None:
    old = ca_at(T0)
    new = ca_at(T0 + dt.timedelta(hours=100))
    leaf = leaf_at(new, T0 + dt.timedelta(hours=100))
    at = T0 + dt.timedelta(hours=121)
    step = decide(observed([old, new], leaf, published_at=T0), NAMES, at, POLICY)
    assert step.action is Action.PRUNE and step.trusted == (new.cert,)
    step = decide(observed([old], None, published_at=T0), NAMES, at, POLICY)
    assert step.action is Action.NEW_CA and step.trusted == ()


def test_a_leaf_not_signed_by_any_trusted_ca_is_replaced_at_once() -> None:
    ca, stranger = ca_at(T0), ca_at(T0)
    step = decide(observed([ca], leaf_at(stranger, T0), published_at=T0), NAMES, T0, POLICY)
    assert step.action is Action.ISSUE and "not signed by a trusted CA" in step.reason

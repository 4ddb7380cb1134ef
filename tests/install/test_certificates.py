"""The certificate builder (pure), the renewal plan, the `python -m certs` command,
and a real TLS handshake with the generated material."""

from __future__ import annotations

import base64
import datetime as dt
import io
import socket
import ssl
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs import builder, files, overlay
from certs.builder import Action, KeyPair
from certs.cli import main
from certs.durations import format_remaining, parse_duration

NOW = dt.datetime(2030, 6, 1, 12, 0, tzinfo=dt.UTC)
DNS = builder.service_dns_names()
DAY = dt.timedelta(days=1)


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return builder.new_ca(NOW)


@pytest.fixture(scope="module")
def serving(ca: KeyPair) -> KeyPair:
    return builder.new_serving(ca, DNS, NOW)


# --- the builder ---------------------------------------------------------------


def test_the_service_names_cover_every_way_a_client_can_address_the_webhook() -> None:
    assert DNS == [
        "elb-gate-webhook",
        "elb-gate-webhook.elb-system",
        "elb-gate-webhook.elb-system.svc",
        "elb-gate-webhook.elb-system.svc.cluster.local",
    ]


def test_the_ca_is_a_critical_ca_that_may_sign_leaves_only(ca: KeyPair) -> None:
    bc = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints)
    usage = ca.cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert bc.critical and bc.value.ca is True and bc.value.path_length == 0
    assert usage.key_cert_sign and usage.crl_sign
    assert ca.cert.issuer == ca.cert.subject


def test_the_serving_certificate_names_every_service_name_and_serves_only(
    serving: KeyPair,
) -> None:
    bc = serving.cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    eku = serving.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    usage = serving.cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert builder.dns_names_of(serving.cert) == DNS
    assert bc.ca is False
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert usage.digital_signature and not usage.key_cert_sign


def test_the_serving_certificate_is_signed_by_the_ca_and_by_no_other(
    ca: KeyPair, serving: KeyPair
) -> None:
    other = builder.new_ca(NOW)
    assert builder.issued_by(serving.cert, ca.cert)
    assert not builder.issued_by(serving.cert, other.cert)


@pytest.mark.parametrize(
    ("make", "days"),
    [("ca", builder.CA_DAYS), ("serving", builder.SERVING_DAYS)],
)
def test_validity_starts_slightly_in_the_past_and_lasts_the_requested_days(
    ca: KeyPair, serving: KeyPair, make: str, days: int
) -> None:
    cert = ca.cert if make == "ca" else serving.cert
    assert cert.not_valid_before_utc == NOW - builder.BACKDATE
    assert cert.not_valid_after_utc == NOW + dt.timedelta(days=days)


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    short_ca = builder.new_ca(NOW, days=30)
    leaf = builder.new_serving(short_ca, DNS, NOW, days=365)
    assert leaf.cert.not_valid_after_utc == short_ca.cert.not_valid_after_utc


def test_pem_round_trips_to_the_same_pair(serving: KeyPair) -> None:
    again = KeyPair.from_pem(serving.cert_pem(), serving.key_pem())
    assert again.cert == serving.cert
    assert again.key.private_numbers() == serving.key.private_numbers()


def test_a_serving_certificate_without_names_is_refused(ca: KeyPair) -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        builder.new_serving(ca, [], NOW)


# --- when to (re)issue -------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "at", "renew_before", "expected"),
    [
        ("fresh material is kept", NOW, 30 * DAY, Action.KEEP),
        ("a leaf outside the window is kept", NOW + 300 * DAY, 30 * DAY, Action.KEEP),
        ("a leaf inside the window is re-issued", NOW + 340 * DAY, 30 * DAY, Action.NEW_SERVING),
        ("an expired leaf is re-issued", NOW + 400 * DAY, 30 * DAY, Action.NEW_SERVING),
        ("a CA inside the window is replaced", NOW + 3640 * DAY, 30 * DAY, Action.NEW_CA),
    ],
)
def test_the_plan_renews_only_what_is_due(
    ca: KeyPair,
    serving: KeyPair,
    case: str,
    at: dt.datetime,
    renew_before: dt.timedelta,
    expected: Action,
) -> None:
    assert builder.plan(ca, serving, DNS, at, renew_before).action is expected, case


def test_the_plan_reissues_a_leaf_for_other_names_or_from_another_ca(
    ca: KeyPair, serving: KeyPair
) -> None:
    stranger = builder.new_serving(builder.new_ca(NOW), DNS, NOW)
    renamed = [*DNS, "elb-gate-webhook.other"]
    assert builder.plan(ca, stranger, DNS, NOW, DAY).action is Action.NEW_SERVING
    assert builder.plan(ca, serving, renamed, NOW, DAY).action is Action.NEW_SERVING
    assert builder.plan(ca, None, DNS, NOW, DAY).action is Action.NEW_SERVING
    assert builder.plan(None, None, DNS, NOW, DAY).action is Action.NEW_CA


def test_the_ca_bundle_keeps_trusting_the_previous_ca_until_it_expires(ca: KeyPair) -> None:
    new = builder.new_ca(NOW)
    both = x509.load_pem_x509_certificates(builder.ca_bundle(new.cert, ca.cert, NOW))
    later = NOW + dt.timedelta(days=builder.CA_DAYS + 1)
    alone = x509.load_pem_x509_certificates(builder.ca_bundle(new.cert, ca.cert, later))
    assert both == [new.cert, ca.cert]
    assert alone == [new.cert]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", dt.timedelta(days=30)),
        ("720h", dt.timedelta(hours=720)),
        ("1d12h", dt.timedelta(days=1, hours=12)),
        ("90m", dt.timedelta(minutes=90)),
        ("45s", dt.timedelta(seconds=45)),
    ],
)
def test_durations_read_as_operators_write_them(text: str, expected: dt.timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "d30", "30 days", "-1d", "1.5d"])
def test_a_malformed_duration_is_refused_with_an_example(text: str) -> None:
    with pytest.raises(ValueError, match="like 30d"):
        parse_duration(text)


def test_remaining_time_reads_as_days_and_hours_or_as_expired() -> None:
    assert format_remaining(dt.timedelta(days=29, hours=23, minutes=5)) == "in 29d 23h"
    assert format_remaining(-dt.timedelta(days=2, hours=1)) == "EXPIRED 2d 1h ago"


# --- the command and what it writes ---------------------------------------------------


def _run(argv: list[str], now: dt.datetime) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out=out, now=now), out.getvalue()


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    base = tmp_path / "manifests" / "base"
    base.mkdir(parents=True)
    # A base with both kinds of webhook configuration, as the real one has.
    (base / overlay.WEBHOOK_CONFIG_FILE).write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": "elb-gate"},
                    "webhooks": [{"name": "a.elb-gate.io"}, {"name": "b.elb-gate.io"}],
                },
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "elb-gate"},
                    "webhooks": [{"name": "c.elb-gate.io"}],
                },
            ]
        )
    )
    return {
        "base": base,
        "out": tmp_path / "certs" / "out",
        "overlay": tmp_path / "manifests" / "overlays" / "generated",
    }


def _args(paths: dict[str, Path], *extra: str) -> list[str]:
    return [
        "--out",
        str(paths["out"]),
        "--overlay",
        str(paths["overlay"]),
        "--base",
        str(paths["base"]),
        *extra,
    ]


def test_generate_writes_keys_private_and_an_overlay_over_the_base(
    paths: dict[str, Path],
) -> None:
    code, text = _run(_args(paths), NOW)
    kustomization = yaml.safe_load((paths["overlay"] / "kustomization.yaml").read_text())
    assert code == 0 and text.startswith("new-ca:")
    assert (paths["out"] / "ca.key").stat().st_mode & 0o777 == 0o600
    assert (paths["out"] / "tls.key").stat().st_mode & 0o777 == 0o600
    assert (paths["overlay"] / overlay.SECRET_FILE).stat().st_mode & 0o777 == 0o600
    assert kustomization["resources"] == ["../../base", overlay.SECRET_FILE]
    assert len(kustomization["patches"]) == 2


def test_the_overlay_patches_the_ca_bundle_into_every_webhook_by_name(
    paths: dict[str, Path],
) -> None:
    _run(_args(paths), NOW)
    ca_pem = (paths["out"] / "ca.crt").read_bytes()
    patched = {}
    for entry in yaml.safe_load((paths["overlay"] / "kustomization.yaml").read_text())["patches"]:
        patch = yaml.safe_load((paths["overlay"] / entry["path"]).read_text())
        for hook in patch["webhooks"]:
            patched[hook["name"]] = base64.b64decode(hook["clientConfig"]["caBundle"])
    assert patched == {name: ca_pem for name in ("a.elb-gate.io", "b.elb-gate.io", "c.elb-gate.io")}


def test_the_secret_holds_the_serving_pair_the_deployment_mounts(paths: dict[str, Path]) -> None:
    _run(_args(paths), NOW)
    secret = yaml.safe_load((paths["overlay"] / overlay.SECRET_FILE).read_text())
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "elb-gate-webhook-tls",
        "namespace": "elb-system",
        "labels": {"app.kubernetes.io/part-of": "elb-gate"},
    }
    assert data["tls.crt"] == (paths["out"] / "tls.crt").read_bytes()
    assert data["tls.key"] == (paths["out"] / "tls.key").read_bytes()


def test_a_second_run_changes_nothing_while_nothing_is_due(paths: dict[str, Path]) -> None:
    _run(_args(paths), NOW)
    before = files.load(paths["out"])
    code, text = _run(_args(paths), NOW + 10 * DAY)
    after = files.load(paths["out"])
    assert code == 0 and text.startswith("keep:")
    assert before.ca is not None and after.ca is not None
    assert before.serving is not None and after.serving is not None
    assert after.ca.cert == before.ca.cert and after.serving.cert == before.serving.cert


def test_renew_before_reissues_the_leaf_and_keeps_the_ca(paths: dict[str, Path]) -> None:
    _run(_args(paths), NOW)
    before = files.load(paths["out"])
    code, text = _run(_args(paths, "--renew-before", "60d"), NOW + 320 * DAY)
    after = files.load(paths["out"])
    assert code == 0 and text.startswith("new-serving:")
    assert before.ca is not None and after.ca is not None and after.serving is not None
    assert before.serving is not None
    assert after.ca.cert == before.ca.cert
    assert after.serving.cert != before.serving.cert
    assert after.serving.cert.not_valid_after_utc > NOW + 600 * DAY
    assert builder.issued_by(after.serving.cert, before.ca.cert)


def test_a_rotated_ca_stays_in_the_bundle_next_to_the_new_one(paths: dict[str, Path]) -> None:
    _run(_args(paths, "--ca-days", "40", "--serving-days", "20"), NOW)
    old_ca = files.load(paths["out"]).ca
    code, text = _run(_args(paths, "--renew-before", "30d"), NOW + 15 * DAY)
    secret = yaml.safe_load((paths["overlay"] / overlay.SECRET_FILE).read_text())
    bundle = x509.load_pem_x509_certificates(base64.b64decode(secret["data"]["ca.crt"]))
    new_ca = files.load(paths["out"]).ca
    assert code == 0 and text.startswith("new-ca:")
    assert old_ca is not None and new_ca is not None
    assert bundle == [new_ca.cert, old_ca.cert]


def test_a_base_without_webhook_configurations_fails_before_writing_a_key(
    paths: dict[str, Path],
) -> None:
    (paths["base"] / overlay.WEBHOOK_CONFIG_FILE).write_text("kind: ConfigMap\n")
    code, _ = _run(_args(paths), NOW)
    assert code == 2
    assert not paths["out"].exists()


def test_status_prints_expiry_and_fails_when_renewal_is_due(paths: dict[str, Path]) -> None:
    _run(_args(paths), NOW)
    status = ["status", "--out", str(paths["out"])]
    ok_code, ok_text = _run(status, NOW)
    due_code, due_text = _run(status, NOW + 355 * DAY)
    assert ok_code == 0
    assert "serving: CN=elb-gate-webhook expires 2031-06-01T12:00:00Z (in 365d 0h)" in ok_text
    assert due_code == 1 and "renew" in due_text


def test_status_reads_any_pem_file_such_as_the_live_secret(paths: dict[str, Path]) -> None:
    _run(_args(paths), NOW)
    code, text = _run(["status", str(paths["out"] / "tls.crt")], NOW)
    assert code == 0 and "names=elb-gate-webhook," in text


def test_status_without_material_says_to_run_make_certs(tmp_path: Path) -> None:
    code, text = _run(["status", "--out", str(tmp_path)], NOW)
    assert code == 1 and "make certs" in text


# --- a real handshake --------------------------------------------------------------


def test_a_client_trusting_only_the_generated_ca_completes_a_handshake(
    paths: dict[str, Path],
) -> None:
    _run(_args(paths), dt.datetime.now(dt.UTC))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    server_ctx.load_cert_chain(paths["out"] / "tls.crt", paths["out"] / "tls.key")
    # With a cafile, the default context loads no system roots: only our CA is trusted.
    client_ctx = ssl.create_default_context(cafile=str(paths["out"] / "ca.crt"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        served: list[str] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                served.append(tls.recv(16).decode())
                tls.sendall(b"pong")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with client_ctx.wrap_socket(
                raw, server_hostname="elb-gate-webhook.elb-system.svc"
            ) as tls:
                tls.sendall(b"ping")
                reply = tls.recv(16)
                peer = tls.getpeercert()
        thread.join(timeout=10)
    assert reply == b"pong" and served == ["ping"]
    assert peer is not None
    assert ("DNS", "elb-gate-webhook.elb-system.svc") in peer["subjectAltName"]


def test_a_client_for_another_name_refuses_the_certificate(paths: dict[str, Path]) -> None:
    _run(_args(paths), dt.datetime.now(dt.UTC))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(paths["out"] / "tls.crt", paths["out"] / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(paths["out"] / "ca.crt"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                server_ctx.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
                client_ctx.wrap_socket(raw, server_hostname="elb-gate-webhook.other.svc")
        thread.join(timeout=10)

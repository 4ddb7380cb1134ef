"""TLS: 1.2+ only, and a rotated certificate is served without a restart."""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trustme
from cryptography import x509

from testbed.certs import WEBHOOK_HOST
from testbed.controlplane import ControlPlane
from testbed.waiting import wait_until
from testbed.webhook_process import WebhookProcess
from webhook.tls import ServingCertificate, server_context

# -- the real process ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def proc(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    """A webhook process of its own (not registered): this module rotates its certificate."""
    with WebhookProcess(control_plane, register=False, pod="elb-gate-webhook-tls") as process:
        yield process


def served_serial(proc: WebhookProcess) -> int:
    """The serial of the certificate a new handshake presents (verified against the CA)."""
    ctx = proc.client_context()
    with (
        socket.create_connection(("127.0.0.1", proc.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=WEBHOOK_HOST) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def expiry_metric(proc: WebhookProcess) -> float:
    match = re.search(
        r"^elb_gate_certificate_expiry_timestamp_seconds ([0-9.e+]+)$", proc.metrics(), re.M
    )
    assert match, "certificate expiry metric missing"
    return float(match.group(1))


def test_a_rotated_certificate_is_served_to_new_handshakes_without_restart(
    proc: WebhookProcess,
) -> None:
    assert proc.process is not None
    pid = proc.process.pid
    assert served_serial(proc) == proc.certificate.serial
    assert expiry_metric(proc) == proc.certificate.not_after.timestamp()

    new_serial = proc.certificate.rotate(valid_for=timedelta(days=90))

    wait_until(lambda: served_serial(proc) == new_serial, 30, "the rotated certificate")
    assert proc.process is not None and proc.process.pid == pid and proc.process.poll() is None
    wait_until(
        lambda: expiry_metric(proc) == proc.certificate.not_after.timestamp(),
        30,
        "the expiry metric of the rotated certificate",
    )


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")  # offering 1.1 is the point
def test_tls_older_than_1_2_is_refused(proc: WebhookProcess) -> None:
    ctx = proc.client_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client offer 1.1: the server must refuse
    with (
        socket.create_connection(("127.0.0.1", proc.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        ctx.wrap_socket(raw, server_hostname=WEBHOOK_HOST)


# -- the reloader, in process ---------------------------------------------------------------


def write_pair(ca: trustme.CA, cert_path: Path, key_path: Path, days: int) -> datetime:
    leaf = ca.issue_cert(WEBHOOK_HOST, not_after=datetime.now(UTC) + timedelta(days=days))
    cert_path.write_bytes(leaf.cert_chain_pems[0].bytes())
    key_path.write_bytes(leaf.private_key_pem.bytes())
    return x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).not_valid_after_utc


def test_a_half_rotated_pair_keeps_the_old_certificate_until_the_key_arrives(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = write_pair(ca, cert, key, days=10)
    seen: list[datetime] = []
    serving = ServingCertificate(str(cert), str(key), on_loaded=seen.append)
    assert serving.reload_if_changed() and serving.not_after == first

    spare_key = tmp_path / "next.key"
    second = write_pair(ca, cert, spare_key, days=20)  # the cert lands first...
    assert not serving.reload_if_changed()
    assert serving.loaded and serving.not_after == first
    spare_key.replace(key)  # ...then its key
    assert serving.reload_if_changed() and serving.not_after == second
    assert seen == [first, second]
    assert not serving.reload_if_changed()  # unchanged files: nothing to do


def test_missing_files_leave_it_unloaded_until_they_appear(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    serving = ServingCertificate(str(cert), str(key))
    assert not serving.reload_if_changed() and not serving.loaded
    write_pair(trustme.CA(), cert, key, days=5)
    assert serving.reload_if_changed() and serving.loaded


def test_garbage_is_never_loaded(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    serving = ServingCertificate(str(cert), str(key))
    assert not serving.reload_if_changed() and not serving.loaded


def test_the_server_context_refuses_anything_below_tls_1_2() -> None:
    assert server_context().minimum_version == ssl.TLSVersion.TLSv1_2

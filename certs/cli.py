"""``python -m certs``: issue/renew the webhook's certificates and write the overlay.

    python -m certs [generate] [--renew-before 30d] [--out certs/out]
                    [--overlay manifests/overlays/generated] [--base manifests/base]
    python -m certs status [--warn-within 14d] [PEM_FILE|- ...]

``generate`` is idempotent: it keeps a valid CA and serving certificate, and
re-issues only what :func:`certs.builder.plan` says is due, then (re)writes
the overlay so ``kubectl apply -k`` picks the material up.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from cryptography import x509

from certs import builder, files, overlay
from certs.builder import Action
from certs.durations import format_remaining, parse_duration

DEFAULT_OUT = Path("certs/out")
DEFAULT_OVERLAY = Path("manifests/overlays/generated")
DEFAULT_BASE = Path("manifests/base")


def main(argv: Sequence[str], out: TextIO = sys.stdout, now: dt.datetime | None = None) -> int:
    """Run the command; return the process exit code (``now`` is for tests)."""
    args = _parser().parse_args(_with_default_command(list(argv)))
    now = now or dt.datetime.now(dt.UTC)
    try:
        if args.command == "status":
            return status(args, out, now)
        return generate(args, out, now)
    except ValueError as exc:
        print(f"certs: {exc}", file=sys.stderr)
        return 2


def generate(args: argparse.Namespace, out: TextIO, now: dt.datetime) -> int:
    """Issue what is due, save it under ``--out``, write the overlay."""
    # Read the base first: a broken base must fail before any key is written.
    configs = overlay.read_webhook_configs(args.base)
    dns_names = builder.service_dns_names(args.service, args.namespace)
    material = files.load(args.out)
    decision = builder.plan(material.ca, material.serving, dns_names, now, args.renew_before)
    ca, serving, previous = material.ca, material.serving, material.previous_ca
    if decision.action is Action.NEW_CA:
        previous = ca.cert if ca is not None else None
        ca = builder.new_ca(now, days=args.ca_days)
    assert ca is not None
    if decision.action is not Action.KEEP:
        serving = builder.new_serving(ca, dns_names, now, days=args.serving_days)
    assert serving is not None
    if previous is not None and previous.not_valid_after_utc <= now:
        previous = None
    files.save(args.out, files.Material(ca, serving, previous))
    bundle = builder.ca_bundle(ca.cert, previous, now)
    rendered = overlay.render(
        overlay.relative_base(args.base, args.overlay),
        configs,
        serving,
        bundle,
        secret_name=args.secret_name,
        namespace=args.namespace,
    )
    overlay.write(args.overlay, rendered)
    print(f"{decision.action.value}: {decision.reason}", file=out)
    _describe("CA", ca.cert, now, out)
    if previous is not None:
        _describe("previous CA (still trusted)", previous, now, out)
    _describe("serving", serving.cert, now, out)
    print(
        f"overlay written to {args.overlay}/ — apply with: kubectl apply -k {args.overlay}",
        file=out,
    )
    return 0


def status(args: argparse.Namespace, out: TextIO, now: dt.datetime) -> int:
    """Print expiry of the local material (or of the PEM files given); exit 1
    when anything is missing, expired, or expires within ``--warn-within``."""
    healthy = True
    if args.files:
        for name in args.files:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
            for cert in x509.load_pem_x509_certificates(data):
                healthy &= _describe(name, cert, now, out, args.warn_within)
        return 0 if healthy else 1
    material = files.load(args.out)
    if material.ca is None or material.serving is None:
        print(f"no certificate material in {args.out}/: run `make certs`", file=out)
        return 1
    healthy &= _describe("CA", material.ca.cert, now, out, args.warn_within)
    if material.previous_ca is not None:
        _describe("previous CA (still trusted)", material.previous_ca, now, out)
    healthy &= _describe("serving", material.serving.cert, now, out, args.warn_within)
    if not builder.issued_by(material.serving.cert, material.ca.cert):
        print("serving certificate was NOT issued by the CA: run `make certs`", file=out)
        healthy = False
    return 0 if healthy else 1


def _describe(
    label: str,
    cert: x509.Certificate,
    now: dt.datetime,
    out: TextIO,
    warn_within: dt.timedelta = dt.timedelta(0),
) -> bool:
    not_after = cert.not_valid_after_utc
    names = builder.dns_names_of(cert)
    line = f"{label}: {cert.subject.rfc4514_string()} expires {not_after:%Y-%m-%dT%H:%M:%SZ} "
    line += f"({format_remaining(not_after - now)})"
    if names:
        line += " names=" + ",".join(names)
    ok = not builder.expires_within(cert, now, warn_within)
    if not ok:
        line += "  <-- renew: `make certs ARGS='--renew-before 30d'`"
    print(line, file=out)
    return ok


def _duration(text: str) -> dt.timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _with_default_command(argv: list[str]) -> list[str]:
    # `python -m certs --renew-before 30d` means generate: the Makefile passes ARGS as is.
    if not argv or argv[0] not in ("generate", "status", "-h", "--help"):
        return ["generate", *argv]
    return argv


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m certs",
        description="Issue or renew the webhook's certificates and write the kustomize overlay "
        "(generate), or print their expiry dates (status).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="issue/renew certificates and write the overlay")
    gen.add_argument("--out", type=Path, default=DEFAULT_OUT, help="material dir (%(default)s)")
    gen.add_argument("--overlay", type=Path, default=DEFAULT_OVERLAY, help="(%(default)s)")
    gen.add_argument("--base", type=Path, default=DEFAULT_BASE, help="(%(default)s)")
    gen.add_argument(
        "--renew-before",
        type=_duration,
        default=parse_duration("30d"),
        metavar="DURATION",
        help="re-issue the serving certificate (keeping the CA) when it expires within this "
        "(default 30d; e.g. 60d, 720h)",
    )
    gen.add_argument("--ca-days", type=int, default=builder.CA_DAYS, help="(%(default)s)")
    gen.add_argument("--serving-days", type=int, default=builder.SERVING_DAYS, help="(%(default)s)")
    gen.add_argument("--service", default=builder.SERVICE_NAME, help="(%(default)s)")
    gen.add_argument("--namespace", default=builder.SERVICE_NAMESPACE, help="(%(default)s)")
    gen.add_argument("--secret-name", default=overlay.SECRET_NAME, help="(%(default)s)")
    st = sub.add_parser("status", help="print expiry dates; exit 1 when renewal is due")
    st.add_argument("--out", type=Path, default=DEFAULT_OUT, help="material dir (%(default)s)")
    st.add_argument(
        "--warn-within",
        type=_duration,
        default=parse_duration("14d"),
        metavar="DURATION",
        help="exit 1 when a certificate expires within this (default 14d, as the alert)",
    )
    st.add_argument("files", nargs="*", help="PEM files to inspect instead ('-' = stdin)")
    return parser

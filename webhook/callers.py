"""Who is calling the admission port, and what a caller that is not the API server may cost.

A self-managed API server presents a client certificate to admission webhooks
when its AdmissionConfiguration names a ``kubeConfigFile``; AKS's cannot be
configured so. ``ELB_GATE_CLIENT_AUTH`` says what the webhook does with it
(docs/security.md, "Telling the API server from other callers"):

* ``off`` — no certificate is asked for; every caller is served alike
  (``unknown``), as the API server. The admission port must then be kept to the
  API server by the network (``networkPolicy.admissionFrom`` in the chart).
* ``verify`` — a certificate is asked for, not required. A caller whose
  certificate the CA in ``ELB_GATE_CLIENT_CA_FILE`` verifies and that carries one
  of ``ELB_GATE_CLIENT_NAMES`` is the ``api-server``; any other is
  ``unverified``: at most ``ELB_GATE_UNVERIFIED_IN_FLIGHT_PER_SOURCE`` requests in
  flight per source address (429 beyond), bodies of at most
  ``ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES`` (413), and denials without their
  reasons (which name Lease holders, their users and pods).
* ``require`` — the TLS handshake fails without a certificate the CA verifies,
  and a verified certificate without an allowed name gets a 403: only the API
  server is ever answered.

A certificate the CA does not verify fails the handshake in both modes.
Everything here runs before the body is read, so a refused caller costs no
decoding and no API call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from elbgate.settings import ClientAuth, WebhookSettings
from webhook.review import AdmissionResponse

CallerKind = Literal["api-server", "unverified", "unknown"]


@dataclass(frozen=True, slots=True)
class Caller:
    """One request's caller: what it proved, where it came from."""

    kind: CallerKind
    source: str
    """The peer address (per-source limits key on it)."""
    names: tuple[str, ...] = ()
    """The subject CN and DNS names of the verified certificate, if any."""
    refused: str = ""
    """Why the request is refused before it is read (``require`` with a wrong name)."""


def certificate_names(peercert: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The subject commonName(s) and DNS subjectAltNames of a verified peer
    certificate, as :meth:`ssl.SSLSocket.getpeercert` returns it (``None``/empty: none)."""
    if not peercert:
        return ()
    names: list[str] = []
    for rdn in peercert.get("subject", ()):
        names += [value for key, value in rdn if key == "commonName"]
    names += [value for key, value in peercert.get("subjectAltName", ()) if key == "DNS"]
    return tuple(dict.fromkeys(names))


def classify(
    mode: ClientAuth,
    peercert: Mapping[str, Any] | None,
    allowed_names: Sequence[str],
    source: str,
) -> Caller:
    """Who the caller is, from the certificate the TLS layer verified (pure).

    The TLS layer has already refused a certificate the CA does not verify, and
    in ``require`` mode a missing one; what is left is to match the names."""
    if mode == "off":
        return Caller("unknown", source)
    names = certificate_names(peercert)
    if names and not set(names).isdisjoint(allowed_names):
        return Caller("api-server", source, names)
    if mode == "require":
        shown = ", ".join(names) or "no name"
        return Caller(
            "unverified",
            source,
            names,
            refused=f"client certificate ({shown}) is not one of ELB_GATE_CLIENT_NAMES "
            f"({', '.join(allowed_names)}); only the API server is answered here",
        )
    return Caller("unverified", source, names)


class SourceLimit:
    """At most ``per_source`` requests in flight from one source address;
    ``on_change`` is told the total in flight whenever it changes."""

    def __init__(
        self, per_source: int, on_change: Callable[[int], None] = lambda _total: None
    ) -> None:
        self.per_source = per_source
        self.on_change = on_change
        self._in_flight: Counter[str] = Counter()

    @property
    def in_flight(self) -> int:
        """Requests in flight across all sources."""
        return sum(self._in_flight.values())

    @contextmanager
    def enter(self, source: str) -> Iterator[bool]:
        """Yields ``True`` and counts the request while the block runs, or yields
        ``False`` (and counts nothing) when ``source`` is at its limit."""
        if self._in_flight[source] >= self.per_source:
            yield False
            return
        self._in_flight[source] += 1
        self.on_change(self.in_flight)
        try:
            yield True
        finally:
            self._in_flight[source] -= 1
            if not self._in_flight[source]:
                del self._in_flight[source]
            self.on_change(self.in_flight)


def without_reasons(response: AdmissionResponse) -> AdmissionResponse:
    """What an unverified caller is told: the decision and its status, not why.

    A denial's text names the Lease holder, its user and pod, and the active
    searches: facts the caller may have no right to read. Warnings carry the
    same text, so they go too. A patch is kept: the Lease stamp's patch holds
    only what the request itself sent and the webhook's clock."""
    if response.allowed:
        return AdmissionResponse(
            allowed=True, code=response.code, patch=response.patch, uid=response.uid
        )
    status = f"{response.code} {response.reason}".strip()
    return AdmissionResponse(
        allowed=False,
        code=response.code,
        reason=response.reason,
        message=f"refused ({status}); elb-gate gives its reasons only to the API server, "
        "and this caller presented no client certificate that ELB_GATE_CLIENT_CA_FILE "
        "verifies with a name in ELB_GATE_CLIENT_NAMES",
        uid=response.uid,
    )


@dataclass
class CallerPolicy:
    """What the HTTP layer applies per caller (``ELB_GATE_CLIENT_AUTH`` verify or
    require; with ``off`` there is none and every caller is served alike)."""

    mode: ClientAuth
    names: tuple[str, ...]
    limit: SourceLimit
    unverified_max_bytes: int
    record: Callable[[CallerKind, str], None] = field(default=lambda _kind, _outcome: None)
    """Told each request's caller kind and outcome (answered, refused, limited,
    too_large, malformed)."""

    @classmethod
    def from_settings(
        cls,
        webhook: WebhookSettings,
        record: Callable[[CallerKind, str], None] = lambda _kind, _outcome: None,
        in_flight: Callable[[int], None] = lambda _total: None,
    ) -> CallerPolicy | None:
        """The policy ``webhook`` settings ask for, reporting to ``record`` and
        ``in_flight``; ``None`` when ``ELB_GATE_CLIENT_AUTH=off``."""
        if webhook.client_auth == "off":
            return None
        return cls(
            webhook.client_auth,
            webhook.client_names,
            SourceLimit(webhook.unverified_in_flight_per_source, in_flight),
            webhook.unverified_max_request_bytes,
            record,
        )

    def identify(self, peercert: Mapping[str, Any] | None, source: str) -> Caller:
        """:func:`classify` with this policy's mode and names."""
        return classify(self.mode, peercert, self.names, source)

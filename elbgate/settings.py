"""Typed settings, one section per component, built once at start-up from the environment.

:class:`Settings` composes the sections; a composition root (``python -m webhook``,
``python -m controller``, the ``elb-gate`` CLI) builds it with :meth:`Settings.from_env`
and hands each policy only the section(s) it reads: :class:`GateSettings` (the
protocol every component shares), :class:`ClientSettings` (the submit-path client),
:class:`WebhookSettings`, :class:`RuleSettings` (the search-admission rules beyond the
two gates, also reported by the CLI), :class:`ControllerSettings` (leader timing
included) and :class:`ServerSettings` (what both servers share).

The ``BLAST_*`` keys are the ones the existing submit paths already read, with
the same defaults, so a Deployment can share one ConfigMap with them. elb-gate's
own keys start ``ELB_GATE_``. A bad value is refused with a message naming the
variable; nothing is silently defaulted, and every problem is reported at once.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from elbgate import quantity
from elbgate.lease import Expiry
from elbgate.selectors import SelectorError, parse_selector

Enforcement = Literal["deny", "warn"]
RuleMode = Literal["deny", "warn", "off"]
"""A search-admission rule beyond the two gates: refuse, admit with a warning, or skip.
``deny`` still admits with a warning while ``ELB_GATE_ENFORCEMENT=warn``."""
OrphanPolicy = Literal["delete", "warn"]
LogFormat = Literal["json", "text"]
CensusRead = Literal["list", "watch"]
"""Where the webhook reads Gate B's census: a LIST per judged admission, or its own
Job watch at a fence (docs/design.md, "The census read at a fence")."""
FairTurns = Literal["on", "off"]
"""Whether the Lease guard gives a free turn to the submit path that waited longest."""
ClientAuth = Literal["off", "verify", "require"]
"""What the webhook asks of a caller's client certificate (docs/security.md)."""
Certificates = Literal["off", "managed"]

DEFAULT_CONTROLLER_USER = "system:serviceaccount:elb-system:elb-gate-controller"
DEFAULT_LIVENESS_APPS = (
    "finalizer",
    "setup",
    "submit",
    "blast",
    "elb-db-warmup",
    "elb-prepare-db",
    "elb-db-order-oracle",
)
"""The ``app`` of every Job kind the two submit paths create that does work the cluster
must stay up for: ElasticBLAST's four, and the dashboard's DB warm-up, DB preparation
and DB order oracle (whose output the finalizers that follow read). docs/liveness.md
lists each kind and why it counts; its only other ``app`` (``janitor``) is GCP's."""


RENAMED = {
    "ELB_GATE_WEBHOOK_PORT": "ELB_GATE_WEBHOOK_PORT_NUMBER",
    "ELB_GATE_METRICS_PORT": "ELB_GATE_METRICS_PORT_NUMBER",
}
"""Old variable → new. No setting may have a name a kubelet generates for a Service
(``<NAME>_PORT``, ``<NAME>_SERVICE_HOST``, …): a Service named ``elb-gate-webhook``
gives every Pod of its namespace ``ELB_GATE_WEBHOOK_PORT=tcp://<clusterIP>:443``."""

SERVICE_LINK = re.compile(r"^[a-z]+://")
"""The value of a kubelet's Docker-link variable (``tcp://10.0.0.1:443``)."""


class SettingsError(ValueError):
    """The environment holds an incoherent set of settings; ``problems`` names each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid settings: " + "; ".join(problems))


T = TypeVar("T")
Parser = Callable[[str, float], T]
"""Turns a variable's raw value into its setting, or raises ValueError saying why."""


def _parse_int(raw: str, minimum: float) -> int:
    try:
        value = int(raw, 10)
    except ValueError:
        raise ValueError("not a whole number") from None
    if value < minimum:
        raise ValueError(f"must be >= {minimum:g}")
    return value


def _parse_float(raw: str, minimum: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("not a number") from None
    if not value >= minimum or value == float("inf"):
        raise ValueError(f"must be a finite number >= {minimum:g}")
    return value


_DURATION_PART = re.compile(r"(\d+)([dhms])")
_DURATION_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def _parse_duration(raw: str, minimum: float) -> int:
    """Whole seconds from ``8760h``, ``90d``, ``1h30m``, ``45s`` or a bare number."""
    text = raw.strip().lower()
    if text.isdigit():
        value = int(text)
    else:
        parts = _DURATION_PART.findall(text)
        if not text or "".join(n + u for n, u in parts) != text:
            raise ValueError("not a duration like 8760h, 90d, 1h30m or 45s")
        value = sum(int(n) * _DURATION_UNIT[u] for n, u in parts)
    if value < minimum:
        raise ValueError(f"must be at least {minimum:g}s")
    return value


def _choice(*allowed: str) -> Parser[Any]:
    """One of ``allowed`` (typed by the Literal each use is annotated with)."""

    def parse(raw: str, _minimum: float) -> str:
        if raw not in allowed:
            raise ValueError("must be one of " + ", ".join(allowed))
        return raw

    return parse


def _parse_names(raw: str, _minimum: float) -> tuple[str, ...]:
    names = tuple(part.strip() for part in raw.split(",") if part.strip())
    if not names:
        raise ValueError("must name at least one value")
    return names


def _parse_quantity(convert: Callable[[str], int]) -> Callable[[str, float], str]:
    def parse(raw: str, _minimum: float) -> str:
        try:
            value = convert(raw)
        except quantity.QuantityError:
            raise ValueError("not a Kubernetes quantity (e.g. 6, 5500m, 4Gi, 251.7G)") from None
        if value <= 0:
            raise ValueError("must be > 0")
        return raw

    return parse


def _parse_selector(raw: str, _minimum: float) -> str:
    try:
        parse_selector(raw)
    except SelectorError as exc:
        raise ValueError(str(exc)) from None
    return raw


def _parse_str(raw: str, _minimum: float) -> str:
    return raw


_parse_enforcement: Parser[Enforcement] = _choice("deny", "warn")
_parse_orphan_policy: Parser[OrphanPolicy] = _choice("delete", "warn")
_parse_log_format: Parser[LogFormat] = _choice("json", "text")
_parse_rule_mode: Parser[RuleMode] = _choice("deny", "warn", "off")
_parse_client_auth: Parser[ClientAuth] = _choice("off", "verify", "require")
_parse_fair_turns: Parser[FairTurns] = _choice("on", "off")
_parse_census_read: Parser[CensusRead] = _choice("list", "watch")
_parse_cpu = _parse_quantity(quantity.millicores)
_parse_memory = _parse_quantity(quantity.bytes_of)


def _setting(env: str, default: T, doc: str, parse: Parser[T], minimum: float = 0) -> T:
    """A field read from ``env``: ``default`` and ``parse`` have the field's own type, so
    mypy checks every default against what the variable parses to."""
    out: T = field(
        default=default, metadata={"env": env, "doc": doc, "parse": parse, "minimum": minimum}
    )
    return out


@dataclass(frozen=True)
class GateSettings:
    """The protocol every component shares: the ceiling, the submit Lease's TTL and
    skew (so its expiry rule), and how long a lone finalizer counts as a live search."""

    max_run_concurrency: int = _setting(
        "BLAST_MAX_RUN_CONCURRENCY",
        3,
        "Gate B ceiling: active searches per namespace.",
        parse=_parse_int,
        minimum=1,
    )
    lease_ttl_seconds: int = _setting(
        "BLAST_SUBMIT_LEASE_TTL_SECONDS",
        900,
        "leaseDurationSeconds of a new submit Lease.",
        parse=_parse_int,
        minimum=1,
    )
    clock_skew_seconds: int = _setting(
        "BLAST_LEASE_CLOCK_SKEW_SECONDS",
        30,
        "Margin added to a Lease's expiry before takeover.",
        parse=_parse_int,
    )
    finalizer_grace_seconds: int = _setting(
        "BLAST_FINALIZER_GRACE_SECONDS",
        300,
        "A lone finalizer younger than this is still a live search (its batch work may be coming).",
        parse=_parse_int,
    )

    @property
    def expiry(self) -> Expiry:
        """The Lease-expiry rule these settings set (TTL as the default duration, skew)."""
        return Expiry(self.clock_skew_seconds, self.lease_ttl_seconds)


@dataclass(frozen=True)
class ClientSettings:
    """The submit-path client (library and ``elb-gate submit``): how long it waits and
    how long the submit command may run."""

    capacity_wait_max_seconds: int = _setting(
        "BLAST_CAPACITY_WAIT_MAX_SECONDS",
        1800,
        "Client: longest wait for a free search slot.",
        parse=_parse_int,
    )
    submit_slot_wait_max_seconds: int = _setting(
        "BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS",
        900,
        "Client: longest wait for the submit Lease (default: one Lease TTL).",
        parse=_parse_int,
    )
    celery_soft_time_limit: int = _setting(
        "CELERY_TASK_SOFT_TIME_LIMIT",
        3300,
        "Dashboard task soft limit (checked for coherence).",
        parse=_parse_int,
        minimum=1,
    )
    celery_hard_time_limit: int = _setting(
        "CELERY_TASK_TIME_LIMIT",
        3600,
        "Dashboard task hard limit (checked for coherence).",
        parse=_parse_int,
        minimum=1,
    )
    submit_exec_timeout_seconds: int = _setting(
        "ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS",
        0,
        "Client: exec timeout of `elastic-blast submit`; 0 means TTL - 2 x skew (at least 1 s "
        "below the TTL). Must be < TTL.",
        parse=_parse_int,
    )

    def effective_exec_timeout_seconds(self, gate: GateSettings) -> int:
        """Exec timeout of the submit command: the configured one, or TTL - 2 x skew and
        at least one second below the TTL (a skew of 0 still leaves the release time)."""
        if self.submit_exec_timeout_seconds:
            return self.submit_exec_timeout_seconds
        return gate.lease_ttl_seconds - max(2 * gate.clock_skew_seconds, 1)


@dataclass(frozen=True)
class WebhookSettings:
    """The admission webhook: enforcement, the Lease guard's bounds and trusted users,
    its API deadline, and how it serves (port, TLS, request sizes, callers)."""

    enforcement: Enforcement = _setting(
        "ELB_GATE_ENFORCEMENT",
        "deny",
        "`deny` refuses; `warn` admits with an AdmissionReview warning (staged rollout).",
        parse=_parse_enforcement,
    )
    submitter_identities_file: str = _setting(
        "ELB_GATE_SUBMITTER_IDENTITIES_FILE",
        "",
        "YAML/JSON file mapping holder prefixes to the users/groups of one submit path.",
        parse=_parse_str,
    )
    controller_users: tuple[str, ...] = _setting(
        "ELB_GATE_CONTROLLER_USERS",
        (DEFAULT_CONTROLLER_USER,),
        "Usernames allowed to clear any holder (the controller's service account).",
        parse=_parse_names,
    )
    lease_min_duration_seconds: int = _setting(
        "ELB_GATE_LEASE_MIN_DURATION_SECONDS",
        15,
        "Lease guard: smallest leaseDurationSeconds.",
        parse=_parse_int,
        minimum=1,
    )
    lease_max_duration_seconds: int = _setting(
        "ELB_GATE_LEASE_MAX_DURATION_SECONDS",
        3600,
        "Lease guard: largest leaseDurationSeconds.",
        parse=_parse_int,
        minimum=1,
    )
    api_timeout_seconds: float = _setting(
        "ELB_GATE_API_TIMEOUT_SECONDS",
        1.5,
        "Webhook: deadline of one API call made while deciding; well inside the webhook "
        "timeoutSeconds (the controller's is ELB_GATE_CONTROLLER_API_TIMEOUT_SECONDS).",
        parse=_parse_float,
        minimum=0.01,
    )
    admission_reservation_seconds: float = _setting(
        "ELB_GATE_ADMISSION_RESERVATION_SECONDS",
        120.0,
        "Webhook: how long an admitted search Job counts in the admission record "
        "(ConfigMap elb-gate-admissions) before a census LIST shows it; past it, an entry "
        "whose Job was never stored stops counting. Above the API server's request "
        "timeout (60s), within which an admitted create is stored or has failed.",
        parse=_parse_float,
        minimum=1,
    )
    census_read: CensusRead = _setting(
        "ELB_GATE_CENSUS_READ",
        "watch",
        "Webhook: `watch` reads Gate B's census from the replica's own Job watch, at a "
        "fence written to ELB_GATE_CENSUS_FENCE_JOB (the LIST whenever the watch cannot "
        "say); `list` with a LIST per judged admission (the API server scans the namespace).",
        parse=_parse_census_read,
    )
    census_fence_job: str = _setting(
        "ELB_GATE_CENSUS_FENCE_JOB",
        "elb-gate-census-fence",
        "Webhook: the suspended Job in each gated namespace whose annotation a `watch` "
        "census read writes (the chart creates it).",
        parse=_parse_str,
    )
    fair_turns: FairTurns = _setting(
        "ELB_GATE_FAIR_TURNS",
        "off",
        "Lease guard: `on` gives a free turn (Lease free, a search slot free) to the submit "
        "path (submitter identity) that has waited longest, refusing the others as busy "
        "(409) meanwhile (ConfigMap elb-gate-turns; docs/design.md, Fair turns).",
        parse=_parse_fair_turns,
    )
    fair_turn_hold_seconds: float = _setting(
        "ELB_GATE_FAIR_TURN_HOLD_SECONDS",
        45.0,
        "Fair turns: how long a free turn is kept for the path that waited longest; past "
        "it, a path that did not come loses its place. Above the slowest path's cadence "
        "(the dashboard's 30s).",
        parse=_parse_float,
        minimum=1,
    )
    fair_turn_forget_seconds: float = _setting(
        "ELB_GATE_FAIR_TURN_FORGET_SECONDS",
        300.0,
        "Fair turns: a path not seen trying for this long is no longer waiting (its "
        "waiters gave up).",
        parse=_parse_float,
        minimum=1,
    )
    webhook_port: int = _setting(
        "ELB_GATE_WEBHOOK_PORT_NUMBER", 8443, "HTTPS admission port.", parse=_parse_int
    )
    tls_cert_file: str = _setting(
        "ELB_GATE_TLS_CERT_FILE",
        "/etc/elb-gate/tls/tls.crt",
        "Serving certificate (PEM).",
        parse=_parse_str,
    )
    tls_key_file: str = _setting(
        "ELB_GATE_TLS_KEY_FILE", "/etc/elb-gate/tls/tls.key", "Serving key (PEM).", parse=_parse_str
    )
    tls_secret: str = _setting(
        "ELB_GATE_TLS_SECRET",
        "",
        "Read the serving pair from this Secret of the pod's namespace through the API "
        "(tls.crt, tls.key; polled every 2 s) instead of ELB_GATE_TLS_CERT_FILE/KEY_FILE. "
        "Set with ELB_GATE_CERTIFICATES=managed: the controller writes it.",
        parse=_parse_str,
    )
    max_request_bytes: int = _setting(
        "ELB_GATE_MAX_REQUEST_BYTES",
        8 * 1024 * 1024,
        "Largest AdmissionReview accepted (UPDATE carries two objects of <= 3 MiB each).",
        parse=_parse_int,
        minimum=1024,
    )
    client_auth: ClientAuth = _setting(
        "ELB_GATE_CLIENT_AUTH",
        "off",
        "The API server's admission client certificate: `off` asks for none (AKS cannot send "
        "one); `verify` serves callers without it with no reasons in denials and per-source "
        "limits; `require` answers no one else (docs/security.md).",
        parse=_parse_client_auth,
    )
    client_ca_file: str = _setting(
        "ELB_GATE_CLIENT_CA_FILE",
        "",
        "CA (PEM) that verifies the API server's admission client certificate "
        "(read at start-up; needed unless ELB_GATE_CLIENT_AUTH=off).",
        parse=_parse_str,
    )
    client_names: tuple[str, ...] = _setting(
        "ELB_GATE_CLIENT_NAMES",
        (),
        "Comma-separated names (subject CN or DNS SAN) the API server's certificate may "
        "carry; needed unless ELB_GATE_CLIENT_AUTH=off (a CA signs other clients too).",
        parse=_parse_names,
    )
    unverified_in_flight_per_source: int = _setting(
        "ELB_GATE_UNVERIFIED_IN_FLIGHT_PER_SOURCE",
        2,
        "ELB_GATE_CLIENT_AUTH=verify: requests in flight per source address from callers "
        "not verified as the API server (429 beyond).",
        parse=_parse_int,
        minimum=1,
    )
    unverified_max_request_bytes: int = _setting(
        "ELB_GATE_UNVERIFIED_MAX_REQUEST_BYTES",
        256 * 1024,
        "ELB_GATE_CLIENT_AUTH=verify: largest AdmissionReview from a caller not verified as "
        "the API server (413 beyond).",
        parse=_parse_int,
        minimum=1024,
    )


@dataclass(frozen=True)
class RuleSettings:
    """The search-admission rules beyond the two gates (database staging, capacity,
    feasibility) and the node pool and pod shape they judge by; the webhook applies
    them, ``elb-gate census`` reports the capacity they see."""

    db_staging: RuleMode = _setting(
        "ELB_GATE_DB_STAGING",
        "deny",
        "One staging per database: `deny` refuses a search that would stage a database "
        "another active search uses (or use one being staged), 429 db_staging; `warn` or `off`.",
        parse=_parse_rule_mode,
    )
    capacity: RuleMode = _setting(
        "ELB_GATE_CAPACITY",
        "off",
        "Lower the ceiling to what the ready nodes hold at the search's per-pod requests "
        "(429 capacity): `deny`, `warn` or `off`. Needs the Nodes read (docs/capacity.md).",
        parse=_parse_rule_mode,
    )
    feasibility: RuleMode = _setting(
        "ELB_GATE_FEASIBILITY",
        "off",
        "Refuse at once a search whose pod no ready node can ever hold (422 "
        "db_memory_infeasible): `deny`, `warn` or `off`. Needs the Nodes read.",
        parse=_parse_rule_mode,
    )
    capacity_pool_selector: str = _setting(
        "ELB_GATE_CAPACITY_POOL_SELECTOR",
        "",
        "Label selector of the nodes searches run on (e.g. `agentpool=blastpool`); "
        "empty: every node.",
        parse=_parse_selector,
    )
    capacity_pod_cpu: str = _setting(
        "ELB_GATE_CAPACITY_POD_CPU",
        "6",
        "CPU request of one batch pod, for a search whose first Job does not carry it "
        "(ElasticBLAST requests num-cpus - 2).",
        parse=_parse_cpu,
    )
    capacity_pod_memory: str = _setting(
        "ELB_GATE_CAPACITY_POD_MEMORY",
        "4G",
        "Memory request of one batch pod, when the search's first Job does not carry it.",
        parse=_parse_memory,
    )
    capacity_nodes_per_search: int = _setting(
        "ELB_GATE_CAPACITY_NODES_PER_SEARCH",
        0,
        "0: every search puts one pod on every pool node (sharded/local-SSD layout), so "
        "per-node packing bounds the ceiling; N: a search occupies N whole nodes.",
        parse=_parse_int,
    )
    db_memory_configmap: str = _setting(
        "ELB_GATE_DB_MEMORY_CONFIGMAP",
        "elb-gate-db-memory",
        "Optional ConfigMap in elb-gate's namespace mapping a database to the memory one "
        "node needs to search it (`core_nt: 251.7G`); read when the feasibility rule is on.",
        parse=_parse_str,
    )

    @property
    def reads_nodes(self) -> bool:
        """Does any rule read the nodes (capacity or feasibility on)?"""
        return self.capacity != "off" or self.feasibility != "off"


@dataclass(frozen=True)
class ControllerSettings:
    """The controller: the namespaces it reconciles, orphan and dead-holder policy,
    liveness, resync, leader election timing and its API deadline."""

    namespaces: tuple[str, ...] = _setting(
        "ELB_GATE_NAMESPACES",
        ("default",),
        "Comma-separated gated namespaces (the controller watches these).",
        parse=_parse_names,
    )
    orphan_policy: OrphanPolicy = _setting(
        "ELB_GATE_ORPHAN_POLICY",
        "warn",
        "`warn` flags an orphaned finalizer (annotation, Warning Event, metric, alert) for an "
        "operator to delete; `delete` also deletes it after the delete grace.",
        parse=_parse_orphan_policy,
    )
    orphan_delete_after_seconds: int = _setting(
        "ELB_GATE_ORPHAN_DELETE_AFTER_SECONDS",
        900,
        "Time an orphan stays flagged before deletion.",
        parse=_parse_int,
    )
    reclaim_grace_seconds: int = _setting(
        "ELB_GATE_RECLAIM_GRACE_SECONDS",
        0,
        "Extra wait before a dead-holder reclaim: the Lease must also be unrenewed this long "
        "(0: reclaim as soon as the holder is gone; docs/holder-gone.md).",
        parse=_parse_int,
    )
    holder_node_not_ready_seconds: int = _setting(
        "ELB_GATE_HOLDER_NODE_NOT_READY_SECONDS",
        10,
        "A holder whose pod's node has not been Ready for this long is gone "
        "(counted from the node's Ready condition lastTransitionTime).",
        parse=_parse_int,
    )
    resync_seconds: float = _setting(
        "ELB_GATE_RESYNC_SECONDS",
        30.0,
        "Controller: full reconcile period.",
        parse=_parse_float,
        minimum=0.1,
    )
    liveness_apps: tuple[str, ...] = _setting(
        "ELB_GATE_LIVENESS_APPS",
        DEFAULT_LIVENESS_APPS,
        "`app` labels whose unfinished Jobs mean the cluster is in use.",
        parse=_parse_names,
    )
    leader_lease_name: str = _setting(
        "ELB_GATE_LEADER_LEASE",
        "elb-gate-controller",
        "Controller leader-election Lease.",
        parse=_parse_str,
    )
    leader_lease_seconds: float = _setting(
        "ELB_GATE_LEADER_LEASE_SECONDS",
        15.0,
        "Controller leader-election Lease duration (client-go's default): a standby leads "
        "within it once the leader is gone.",
        parse=_parse_float,
        minimum=1,
    )
    leader_renew_seconds: float = _setting(
        "ELB_GATE_LEADER_RENEW_SECONDS",
        5.0,
        "How often the controller leader renews its Lease; below ELB_GATE_LEADER_LEASE_SECONDS.",
        parse=_parse_float,
        minimum=0.1,
    )
    certificates: Certificates = _setting(
        "ELB_GATE_CERTIFICATES",
        "off",
        "`managed`: the controller's leader owns the webhook's CA and serving pair (Secrets "
        "ELB_GATE_CERT_CA_SECRET and ELB_GATE_TLS_SECRET) and the caBundle of the webhook "
        "configurations named ELB_GATE_WEBHOOK_CONFIGURATION, and renews them "
        '(docs/design.md, "Managed certificates"); `off`: something else provides them.',
        parse=_choice("off", "managed"),
    )
    cert_ca_secret: str = _setting(
        "ELB_GATE_CERT_CA_SECRET",
        "elb-gate-webhook-ca",
        "Managed certificates: the Secret holding the trusted CAs and the signing key "
        "(read by the controller only).",
        parse=_parse_str,
    )
    cert_service: str = _setting(
        "ELB_GATE_CERT_SERVICE",
        "elb-gate-webhook",
        "The webhook Service: the names of the managed serving certificate (<service>, "
        ".<namespace>, .svc, .svc.cluster.local) and the endpoints registration waits for.",
        parse=_parse_str,
    )
    webhook_configuration: str = _setting(
        "ELB_GATE_WEBHOOK_CONFIGURATION",
        "elb-gate",
        "The Validating- and MutatingWebhookConfiguration the controller registers and "
        "whose caBundle it keeps (managed certificates).",
        parse=_parse_str,
    )
    registration_configmap: str = _setting(
        "ELB_GATE_REGISTRATION_CONFIGMAP",
        "",
        "Registration: the ConfigMap of the pod's namespace holding the webhook "
        "configurations; the leader creates them once the webhook Service "
        "(ELB_GATE_CERT_SERVICE) has a ready endpoint, owned by ClusterRole "
        "ELB_GATE_REGISTRATION_OWNER. Empty: something else registers them.",
        parse=_parse_str,
    )
    registration_owner: str = _setting(
        "ELB_GATE_REGISTRATION_OWNER",
        "elb-gate-webhook",
        "Registration: the ClusterRole that owns the registered configurations (deleted "
        "with the release, so the garbage collector removes them).",
        parse=_parse_str,
    )
    cert_ca_seconds: int = _setting(
        "ELB_GATE_CERT_CA_LIFETIME",
        365 * 86400,
        "Managed certificates: lifetime of a CA (8760h, 365d or seconds).",
        parse=_parse_duration,
        minimum=60,
    )
    cert_serving_seconds: int = _setting(
        "ELB_GATE_CERT_SERVING_LIFETIME",
        90 * 86400,
        "Managed certificates: lifetime of a serving certificate (never beyond its CA's).",
        parse=_parse_duration,
        minimum=30,
    )
    cert_renew_fraction: float = _setting(
        "ELB_GATE_CERT_RENEW_FRACTION",
        2 / 3,
        "Managed certificates: a CA or serving certificate is replaced once this fraction of "
        "its lifetime has passed.",
        parse=_parse_float,
        minimum=0.05,
    )
    cert_overlap_seconds: int = _setting(
        "ELB_GATE_CERT_OVERLAP",
        300,
        "Managed certificates: how long a new caBundle is published before a certificate of "
        "its new CA is served, and how long a new serving certificate is served before the "
        "old CA leaves the caBundle. Above the time a caBundle change takes to reach every "
        "API server and a Secret change every webhook Pod (seconds: both are read through "
        "the API).",
        parse=_parse_duration,
        minimum=1,
    )
    cert_check_seconds: float = _setting(
        "ELB_GATE_CERT_CHECK_SECONDS",
        30.0,
        "Managed certificates: how often the leader checks the certificates and caBundle.",
        parse=_parse_float,
        minimum=0.1,
    )
    controller_api_timeout_seconds: float = _setting(
        "ELB_GATE_CONTROLLER_API_TIMEOUT_SECONDS",
        5.0,
        "Controller: deadline of one API call (its LIST/WATCH streams are not cut by it). "
        "The webhook's, which must fit its timeoutSeconds, is ELB_GATE_API_TIMEOUT_SECONDS.",
        parse=_parse_float,
        minimum=0.01,
    )


@dataclass(frozen=True)
class ServerSettings:
    """What both servers (webhook and controller) share: where they listen for metrics
    and health, the pod they run as, and their log format."""

    metrics_port: int = _setting(
        "ELB_GATE_METRICS_PORT_NUMBER",
        9090,
        "Plain-HTTP metrics/health port.",
        parse=_parse_int,
    )
    bind_address: str = _setting(
        "ELB_GATE_BIND_ADDRESS", "0.0.0.0", "Address the servers listen on.", parse=_parse_str
    )
    pod_namespace: str = _setting(
        "ELB_GATE_POD_NAMESPACE",
        "elb-system",
        "Namespace elb-gate runs in (downward API).",
        parse=_parse_str,
    )
    pod_name: str = _setting(
        "ELB_GATE_POD_NAME",
        "",
        "This replica's name (downward API); leader identity.",
        parse=_parse_str,
    )
    log_format: LogFormat = _setting(
        "ELB_GATE_LOG_FORMAT",
        "json",
        "`json` (one object per line) or `text`.",
        parse=_parse_log_format,
    )


SECTIONS: tuple[tuple[str, type[Any]], ...] = (
    ("gate", GateSettings),
    ("client", ClientSettings),
    ("webhook", WebhookSettings),
    ("rules", RuleSettings),
    ("controller", ControllerSettings),
    ("server", ServerSettings),
)
"""Each section's attribute on :class:`Settings` and its class, in the order
:func:`describe` (and ``--help``) lists them."""

_SECTION_OF: dict[str, str] = {
    f.name: attr for attr, cls in SECTIONS for f in dataclasses.fields(cls)
}
"""Which section declares each setting (field names are unique across sections)."""


def _split(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``flat`` field-name values grouped by section; an unknown name is a TypeError."""
    grouped: dict[str, dict[str, Any]] = {attr: {} for attr, _cls in SECTIONS}
    for name, value in flat.items():
        if name not in _SECTION_OF:
            raise TypeError(f"no setting named {name!r}")
        grouped[_SECTION_OF[name]][name] = value
    return grouped


@dataclass(frozen=True)
class Settings:
    """Every section of elb-gate's settings. A composition root builds it with
    :meth:`from_env` and passes each component the section(s) it uses."""

    gate: GateSettings = field(default_factory=GateSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    rules: RuleSettings = field(default_factory=RuleSettings)
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    server: ServerSettings = field(default_factory=ServerSettings)

    @classmethod
    def of(cls, **flat: Any) -> Settings:
        """Settings from field-name values (the rest at their defaults), without the
        coherence checks of :meth:`from_env`: for tests and tools that set a few."""
        return cls(
            **{
                attr: section(**values)
                for (attr, section), values in zip(SECTIONS, _split(flat).values(), strict=True)
            }
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> Settings:
        """Parse ``env`` (usually ``os.environ``); raise :class:`SettingsError` naming
        every bad variable. ``overrides`` (field names) win over the environment."""
        values: dict[str, Any] = {}
        problems: list[str] = [
            f"{old} was renamed {new}; set {new} instead"
            for old, new in RENAMED.items()
            if env.get(old, "").strip() and not SERVICE_LINK.match(env[old].strip())
        ]
        for _attr, section in SECTIONS:
            for f in dataclasses.fields(section):
                meta = f.metadata
                raw = env.get(meta["env"])
                if raw is None or raw.strip() == "":
                    continue
                try:
                    values[f.name] = meta["parse"](raw.strip(), meta["minimum"])
                except ValueError as exc:
                    problems.append(f"{meta['env']}={raw!r}: {exc}")
        values.update(overrides)
        settings = cls.of(**values)
        problems.extend(settings.incoherences())
        if problems:
            raise SettingsError(problems)
        return settings

    def incoherences(self) -> list[str]:
        """Rules across fields (and sections), each problem naming the variables involved."""
        gate, client, webhook, controller = self.gate, self.client, self.webhook, self.controller
        out: list[str] = []
        ttl, ex = gate.lease_ttl_seconds, client.effective_exec_timeout_seconds(gate)
        if ex <= 0 or ex >= ttl:
            out.append(
                f"ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS ({ex}) must be > 0 and < "
                f"BLAST_SUBMIT_LEASE_TTL_SECONDS ({ttl}), so a submit never outlives its Lease"
            )
        soft, hard = client.celery_soft_time_limit, client.celery_hard_time_limit
        if not ex < soft < hard:
            out.append(
                f"need ELB_GATE_SUBMIT_EXEC_TIMEOUT_SECONDS ({ex}) < CELERY_TASK_SOFT_TIME_LIMIT "
                f"({soft}) < CELERY_TASK_TIME_LIMIT ({hard})"
            )
        lo, hi = webhook.lease_min_duration_seconds, webhook.lease_max_duration_seconds
        if not lo <= ttl <= hi:
            out.append(
                f"BLAST_SUBMIT_LEASE_TTL_SECONDS ({ttl}) must lie within "
                f"ELB_GATE_LEASE_MIN_DURATION_SECONDS ({lo}) and "
                f"ELB_GATE_LEASE_MAX_DURATION_SECONDS ({hi})"
            )
        lease, renew = controller.leader_lease_seconds, controller.leader_renew_seconds
        if not renew < lease:
            out.append(
                f"ELB_GATE_LEADER_RENEW_SECONDS ({renew:g}) must be below "
                f"ELB_GATE_LEADER_LEASE_SECONDS ({lease:g}), or leadership lapses between renewals"
            )
        hold, forget = webhook.fair_turn_hold_seconds, webhook.fair_turn_forget_seconds
        if not hold < forget:
            out.append(
                f"ELB_GATE_FAIR_TURN_HOLD_SECONDS ({hold:g}) must be below "
                f"ELB_GATE_FAIR_TURN_FORGET_SECONDS ({forget:g}), or a path waiting for the "
                "turn kept for it is forgotten first"
            )
        if not controller.cert_renew_fraction < 1:
            out.append(
                f"ELB_GATE_CERT_RENEW_FRACTION ({controller.cert_renew_fraction:g}) must be "
                "below 1, or a certificate is renewed only once it has expired"
            )
        if controller.certificates == "managed" and not webhook.tls_secret:
            out.append(
                "ELB_GATE_CERTIFICATES=managed needs ELB_GATE_TLS_SECRET (the Secret the "
                "controller writes the serving pair to)"
            )
        if webhook.client_auth != "off" and not (webhook.client_ca_file and webhook.client_names):
            out.append(
                f"ELB_GATE_CLIENT_AUTH={webhook.client_auth} needs ELB_GATE_CLIENT_CA_FILE (the CA "
                "that signs the API server's admission client certificate) and "
                "ELB_GATE_CLIENT_NAMES (the names that certificate carries)"
            )
        return out


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, doc) for every setting, section by section: ``--help`` and
    the README's pointer are made from this."""
    rows = []
    for _attr, section in SECTIONS:
        for f in dataclasses.fields(section):
            default = f.default
            shown = ",".join(default) if isinstance(default, tuple) else str(default)
            rows.append((f.metadata["env"], shown, f.metadata["doc"]))
    return rows

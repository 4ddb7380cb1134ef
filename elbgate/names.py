"""Names every submit path, the webhook and the controller must agree on.

These are the protocol: changing one breaks interoperation with the existing
submit paths, so they live in one place and nowhere else.
"""

from __future__ import annotations

LEASE_PREFIX = "elb-blast-submit-"
"""Gate A Lease name prefix; the full name is ``elb-blast-submit-<namespace>``."""

ANNOTATION_PREFIX = "elb-gate.io/"
HOLDER_USER_ANNOTATION = ANNOTATION_PREFIX + "holder-user"
"""Username that made the Lease's current holder take it (stamped by the webhook)."""
HOLDER_POD_ANNOTATION = ANNOTATION_PREFIX + "holder-pod"
"""``<namespace>/<pod>/<uid>`` of the holder's pod, from its bound service-account token."""
ORPHANED_SINCE_ANNOTATION = ANNOTATION_PREFIX + "orphaned-since"
"""Set by the controller on a finalizer Job the census calls an orphan."""

APP_LABEL = "app"
JOB_ID_LABEL = "elb-job-id"

DB_LABEL = "db"
"""Set by ElasticBLAST on its batch Jobs: the BLAST database the batch searches."""

FINALIZER_APP = "finalizer"
SETUP_APP = "setup"
SUBMIT_APP = "submit"
BLAST_APP = "blast"
SEARCH_APPS: tuple[str, ...] = (FINALIZER_APP, SETUP_APP, SUBMIT_APP, BLAST_APP)
"""``app`` label values whose Jobs make up a search (gated, and read by the census).

``setup`` Jobs stage the database and the queries before a cold search's batch
work (init-ssd per node, init-pv, partitioned and sharded init: all carry the
search's ``elb-job-id``); the warm-reuse ``import-queries`` Job and the
cloud-split Job are ``setup`` Jobs without one."""
COMPANION_APPS: frozenset[str] = frozenset({SUBMIT_APP, BLAST_APP})
"""Batch work proper: the Jobs a finalizer waits for. What proves a search had batch work
(finishing, not an orphan) is :data:`BATCH_WORK_EVIDENCE_APPS`."""

SEARCH_JOB_SELECTOR = f"{APP_LABEL} in ({','.join(SEARCH_APPS)})"
"""labelSelector of the one census LIST."""
UNFINISHED_JOB_FIELD_SELECTOR = "status.successful=0"
"""fieldSelector that drops Jobs that already succeeded (most of a busy namespace)."""

CENSUS_FENCE_APP = "elb-gate-census-fence"
"""``app`` of each gated namespace's census fence Job: the webhook's census watch selects
it beside the search Jobs (docs/design.md, "The census read at a fence"); never a search."""
CENSUS_FENCE_ANNOTATION = "elb-gate.io/census-fence"
"""Written with a new value on the fence Job by every census read from the watch."""

LIVENESS_CONFIGMAP = "elb-blast-liveness"
ADMISSION_READY_LEASE = "elb-gate-admission"
"""The readiness key, a Lease in each gated namespace: renewed by every webhook replica
the kubelet has found Ready, so a submit path (whose RBAC reads Leases there) knows that
admission is served — held and unexpired — and waits instead of failing on a cold start
(docs/clients.md). Not a lock: any replica renews it; nothing is refused by it."""
ADMISSION_READY_RENEW_SECONDS = 5
ADMISSION_READY_DURATION_SECONDS = 15
ADMISSION_RECORD_CONFIGMAP = "elb-gate-admissions"
"""Written by the webhook in each gated namespace (compare-and-swap): the search Jobs it
admitted that a census LIST may not show yet, so that no two admissions that open a
search or start a staging pass on one observation (:mod:`elbgate.reservations`)."""
ADMISSION_RECORD_KEY = "reservations.json"
BATCH_WORK_RECORD_KEY = "batch-work.json"
SPLIT_RECORD_KEY = "split-searches.json"
"""The admission record's split shards: ``elb-job-id`` → ``<time> <split holder prefix>``."""
"""The admission record's durable evidence that a search had batch work (see
:data:`BATCH_WORK_SEEN_ANNOTATION`), written by the webhook when it admits the work."""
TURNS_CONFIGMAP = "elb-gate-turns"
"""Written by the webhook in each gated namespace (compare-and-swap) while fair turns are
on: which submit paths wait for a free turn and since when (:mod:`elbgate.turns`)."""
TURNS_RECORD_KEY = "waiting.json"
DB_MEMORY_CONFIGMAP = "elb-gate-db-memory"
"""Optional, kept by the operator in elb-gate's namespace: ``<db>: <memory>`` per line,
the memory a search of that database needs on one node (feasibility rule)."""

DB_ENV = "ELB_DB"
"""Env of ElasticBLAST's setup and batch containers: the database they stage or search."""
DB_PARTITION_PREFIX_ENV = "ELB_PARTITION_PREFIX"
"""Env of the partitioned and sharded setup Jobs: the database's partition prefix."""

SA_POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
SA_POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_USER_PREFIX = "system:serviceaccount:"
NAMESPACE_CONTROLLER_USER = "system:serviceaccount:kube-system:namespace-controller"
"""Who empties a namespace being deleted (kube-controller-manager's namespace
controller, with the per-controller credentials every AKS control plane uses)."""


def lease_name(namespace: str) -> str:
    """The Gate A Lease of ``namespace``."""
    return LEASE_PREFIX + namespace


def is_submit_lease_name(name: str | None) -> bool:
    """True for Lease names elb-gate guards (others never reach the webhook)."""
    return name is not None and name.startswith(LEASE_PREFIX)


BATCH_WORK_SEEN_ANNOTATION = ANNOTATION_PREFIX + "batch-work-seen"
"""Set by the controller on a finalizer Job the first time it sees batch work of the
finalizer's search: ``<RFC 3339 time> <app>/<Job name>``. Durable evidence that the search
had batch work, so the finalizer is *finishing*, never an orphan, after its batch Jobs were
TTL-deleted or the controller restarted."""
BATCH_WORK_EVIDENCE_APPS: frozenset[str] = COMPANION_APPS | {SETUP_APP}
"""``app`` labels whose Jobs (with the finalizer's ``elb-job-id``), finished or not, prove
its search had batch work. ``setup`` counts: elastic-blast creates a search's setup Jobs,
then its submit/blast Jobs, and its finalizer last, so a setup Job sharing the id shows the
submit went past them — and setup Jobs carry no TTL, so they outlive the batch Jobs."""
HOLDER_CONTAINER_ANNOTATION = ANNOTATION_PREFIX + "holder-container"
"""Optional, on a submitter's Pod: the container whose process holds the submit Lease. The
controller then judges a restart of that container alone (docs/holder-gone.md)."""

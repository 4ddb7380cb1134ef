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

FINALIZER_APP = "finalizer"
SUBMIT_APP = "submit"
BLAST_APP = "blast"
SEARCH_APPS: tuple[str, ...] = (FINALIZER_APP, SUBMIT_APP, BLAST_APP)
"""``app`` label values whose Jobs make up a search (counted by the census)."""
COMPANION_APPS: frozenset[str] = frozenset({SUBMIT_APP, BLAST_APP})
"""Jobs whose presence keeps a search's finalizer live."""

SEARCH_JOB_SELECTOR = f"{APP_LABEL} in ({','.join(SEARCH_APPS)})"
"""labelSelector of the one census LIST."""
UNFINISHED_JOB_FIELD_SELECTOR = "status.successful=0"
"""fieldSelector that drops Jobs that already succeeded (most of a busy namespace)."""

LIVENESS_CONFIGMAP = "elb-blast-liveness"

SA_POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
SA_POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_USER_PREFIX = "system:serviceaccount:"


def lease_name(namespace: str) -> str:
    """The Gate A Lease of ``namespace``."""
    return LEASE_PREFIX + namespace


def is_submit_lease_name(name: str | None) -> bool:
    """True for Lease names elb-gate guards (others never reach the webhook)."""
    return name is not None and name.startswith(LEASE_PREFIX)

"""Gate A + Gate B on search Jobs (webhook ``search-admission.elb-gate.io``). Pure; no I/O.

docs/design.md, "Gate B — search admission":

* a Job labelled ``app`` in (setup, submit, blast, finalizer) whose
  ``elb-job-id`` is not yet active opens a search: Gate A (the requester holds
  the Lease) and Gate B (active < ceiling). On a cold cluster that is the first
  ``setup`` Job, before any database download starts;
* a Job of an already-active ``elb-job-id`` passes without Gate B and without
  Gate A — except the finalizer, which always needs Gate A;
* a ``setup`` Job without ``elb-job-id`` (warm-reuse ``import-queries``, cloud
  split) belongs to the Lease holder's submit in progress: Gate A only, and it
  opens no search;
* a finalizer without a non-empty ``elb-job-id`` is refused (422), and so is a
  search Job that runs several pods (the census counts one-pod Jobs; see
  :func:`elbgate.job_status.runs_one_pod`);
* UPDATE is judged only when it adds a gated ``app`` or changes ``elb-job-id``;
  DELETE is never gated. Neither costs an API call.

The handler asks :func:`reads_needed` what to read, reads it, takes the census
with :func:`survey`, and calls :func:`decide` with what it saw.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from elbgate.census import Census, CensusMemo, JobRef, census
from elbgate.databases import job_databases
from elbgate.db_staging import staging_conflict
from elbgate.identities import SplitHolder, SubmitterIdentities
from elbgate.job_status import required_completions, runs_one_pod
from elbgate.label_values import job_id_problem, near_miss
from elbgate.lease import LeaseView, holder_source
from elbgate.names import (
    APP_LABEL,
    FINALIZER_APP,
    JOB_ID_LABEL,
    SEARCH_APPS,
    SETUP_APP,
    lease_name,
)
from elbgate.settings import GateSettings, RuleMode, RuleSettings
from webhook.decision import Decision, admit, refuse
from webhook.node_rules import NodesSeen, PodFacts, capacity, feasibility
from webhook.requester import Requester, holds
from webhook.review import AdmissionRequest
from webhook.wording import IDENTITIES_VAR, expiry_phrase, holder_phrase


def shown(value: str) -> str:
    """``value`` with invisible and non-ASCII characters escaped (``fin\\u200balizer``),
    so a denial shows what the label really holds."""
    if value.isascii() and value.isprintable():
        return value
    return value.encode("unicode_escape").decode("ascii")


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A CREATE/UPDATE/DELETE of a Job, as search admission reads it. What its spec says
    (``one_pod`` … ``pod``) is read only for a request search admission judges; for any
    other those fields keep their defaults."""

    operation: str
    namespace: str
    name: str
    app: str
    job_id: str
    old_app: str | None
    """``None`` when there is no oldObject (CREATE, or an UPDATE that lacks it)."""
    old_job_id: str
    requester: Requester
    one_pod: bool = True
    """Completions unset or 1 (:func:`elbgate.job_status.runs_one_pod`)."""
    completions: int | None = 1
    """What a success needs: ``spec.completions`` (``None``: a work-queue Job)."""
    stages: tuple[str, ...] = ()
    """Databases this Job stages (see :mod:`elbgate.databases`)."""
    uses: tuple[str, ...] = ()
    """Databases this Job stages or searches."""
    app_near_miss: str | None = None
    """The gated ``app`` value this Job's ``app`` imitates (``Finalizer``, ``bIast``)."""
    pod: PodFacts = field(default_factory=lambda: PodFacts(None, None, {}, ()))
    """Requests, nodeSelector and tolerations of its pod template (the node rules)."""
    body: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The Job as submitted (the node rules read its databases' parts from it)."""

    @classmethod
    def from_admission(cls, req: AdmissionRequest) -> JobRequest:
        labels, old_labels = _labels(req.obj), _labels(req.old_object)
        obj = req.obj or {}
        meta = obj.get("metadata") or {}
        name = req.name or str(meta.get("name") or meta.get("generateName") or "")
        app = str(labels.get(APP_LABEL) or "")
        labelled = cls(
            operation=req.operation,
            namespace=req.namespace,
            name=name,
            app=app,
            job_id=str(labels.get(JOB_ID_LABEL) or ""),
            old_app=str(old_labels.get(APP_LABEL) or "") if req.old_object is not None else None,
            old_job_id=str(old_labels.get(JOB_ID_LABEL) or ""),
            requester=Requester.from_user_info(req.user),
            app_near_miss=None if app in SEARCH_APPS or not app else near_miss(app, SEARCH_APPS),
            body=obj,
        )
        if not _judged(labelled):
            # A Job controller's status write and the like: admitted on its labels alone,
            # so its spec (databases, pod template) is not read.
            return labelled
        dbs = job_databases(obj)
        return replace(
            labelled,
            one_pod=runs_one_pod(obj),
            completions=required_completions(obj),
            stages=dbs.stages,
            uses=dbs.uses,
            pod=PodFacts.of(obj),
        )

    @property
    def ref(self) -> str:
        """``Job ns/name (app=…, elb-job-id=…)`` as denials name it."""
        app, job_id = shown(self.app), shown(self.job_id) or "-"
        return f"Job {self.namespace}/{self.name} (app={app}, elb-job-id={job_id})"

    @property
    def lease_ref(self) -> str:
        return f"{self.namespace}/{lease_name(self.namespace)}"

    @property
    def holder_work(self) -> bool:
        """A setup Job without ``elb-job-id``: part of the holder's submit, no search."""
        return self.app == SETUP_APP and not self.job_id


class Reads(enum.Enum):
    """What the handler must read before :func:`decide` can answer."""

    NONE = "none"
    """Not gated, or refused on the request alone: no API call."""
    LEASE = "lease"
    """Only the Lease (a setup Job of the holder's submit that stages nothing)."""
    JOBS = "jobs"
    """The census LIST; the Lease only if :func:`lease_needed` says so afterwards."""
    JOBS_AND_LEASE = "jobs_and_lease"
    """Both, concurrently (a finalizer always needs Gate A)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What the handler read: the census of the search Jobs (see :func:`survey`),
    the submit Lease, and, when a node rule is on, what the Node watch cache and the
    operator's database memory table held (no API call: both are watch caches).

    ``lease`` is ``None`` when the Lease does not exist, and also when the handler did
    not read it because :func:`reads_needed` / :func:`lease_needed` said Gate A does not
    apply: :func:`decide` looks at the Lease exactly when those say it is needed, so an
    unread Lease is never judged, and a handler that failed to read one is refused
    (Gate A finds no Lease: fail-closed)."""

    census: Census | None = None
    lease: Mapping[str, Any] | None = None
    nodes: NodesSeen | None = None
    """``None`` when no node rule is on (:func:`node_rules_on`)."""


def node_rules_on(rules: RuleSettings) -> bool:
    """Does any rule read the nodes (so the handler must pass :attr:`Observed.nodes`)?"""
    return rules.reads_nodes


def _judged(job: JobRequest) -> bool:
    """Does this request open or join a search (as opposed to a Job controller write)?
    A near miss of a gated ``app`` is judged (and refused) on the same terms."""
    if job.operation not in ("CREATE", "UPDATE"):
        return False
    if job.app not in SEARCH_APPS and job.app_near_miss is None:
        return False
    if job.operation == "UPDATE" and job.old_app is not None:
        return job.app != job.old_app or job.job_id != job.old_job_id
    return True


def _missing_job_id(job: JobRequest) -> bool:
    return job.app == FINALIZER_APP and not job.job_id.strip()


GATED_VALUES = ", ".join(SEARCH_APPS)


def _near_miss_label(job: JobRequest) -> Decision | None:
    """422 for an ``app`` that imitates a gated one, or an ``elb-job-id`` that holds
    characters ElasticBLAST never writes; the message names the exact expected value."""
    if job.app_near_miss is not None:
        expected = job.app_near_miss
        return refuse(
            422,
            "near_miss_label",
            f"Search admission: {job.ref} carries app={shown(job.app)}: did you mean "
            f"app={expected}? elb-gate gates only the exact lowercase values ({GATED_VALUES}); "
            "a look-alike would slip past both gates, so it is refused. Fix: set "
            f"metadata.labels.app={expected} (elastic-blast submit writes exactly that).",
            label="app",
            expected=expected,
        )
    problem = job_id_problem(job.job_id) if job.app in SEARCH_APPS and job.job_id.strip() else None
    if problem is None:
        return None
    found = "; ".join(problem.found)
    fix = (
        f"did you mean elb-job-id={problem.suggestion}?"
        if problem.suggestion
        else "an elb-job-id is ASCII letters, digits, '-', '_' and '.' only."
    )
    return refuse(
        422,
        "near_miss_label",
        f"Search admission: {job.ref} has an elb-job-id with {found}: {fix} A look-alike "
        "id would open a search of its own next to the real one. Fix: set "
        "metadata.labels.elb-job-id to the search's id exactly as elastic-blast submit wrote it.",
        label="elb-job-id",
        expected=problem.suggestion,
    )


def _near_miss_id(job: JobRequest, seen: Census) -> Decision | None:
    """422 for a new id that differs from an active search's only in case or look."""
    if not job.job_id or seen.is_active(job.job_id):
        return None
    twin = near_miss(job.job_id, seen.active_ids)
    if twin is None:
        return None
    return refuse(
        422,
        "near_miss_label",
        f"Search admission: {job.ref} differs from active search {twin} only in case or "
        f"look-alike characters: did you mean elb-job-id={twin}? Such an id would open a "
        "second search beside the real one. Fix: use the search's id exactly as "
        "elastic-blast submit wrote it.",
        label="elb-job-id",
        expected=twin,
    )


def _refused_on_request(job: JobRequest) -> Decision | None:
    """Refusals that need no observation (422: the object itself is wrong)."""
    near = _near_miss_label(job)
    if near is not None:
        return near
    if _missing_job_id(job):
        return refuse(
            422,
            "missing_job_id",
            f"Search admission: {job.ref} has no elb-job-id label. A finalizer must carry the "
            "elb-job-id of its search: set metadata.labels.elb-job-id (elastic-blast submit does).",
        )
    if not job.one_pod:
        wants = (
            "a work-queue Job (parallelism without completions)"
            if job.completions is None
            else f"completions={job.completions}"
        )
        return refuse(
            422,
            "multi_pod_job",
            f"Search admission: {job.ref} is {wants}. elb-gate counts a search Job as finished "
            "once one pod succeeded (ElasticBLAST's Jobs run one pod; the census LIST skips "
            "succeeded Jobs), so a search Job must leave spec.completions unset or 1: drop "
            "completions/parallelism, or label the Job with an app elb-gate does not gate.",
            completions=job.completions,
        )
    return None


def reads_needed(job: JobRequest) -> Reads:
    """What to read for ``job``; :data:`Reads.NONE` costs no API call."""
    if not _judged(job) or _refused_on_request(job) is not None:
        return Reads.NONE
    if job.holder_work:
        return Reads.JOBS_AND_LEASE if job.stages else Reads.LEASE
    return Reads.JOBS_AND_LEASE if job.app == FINALIZER_APP else Reads.JOBS


def survey(
    job: JobRequest,
    jobs: Sequence[Mapping[str, Any]],
    gate: GateSettings,
    now: datetime,
    reserved: Sequence[JobRef] = (),
    memo: CensusMemo | None = None,
) -> Census:
    """The census of ``jobs`` (the LIST) and the ``reserved`` Jobs (admitted, not listed
    yet: :mod:`elbgate.reservations`) as it bears on ``job`` (``memo``: see
    :class:`~elbgate.census.CensusMemo`)."""
    # An UPDATE's own Job is already stored under its old labels: it must not
    # count against the search it is being moved into or out of.
    if job.operation == "UPDATE":
        jobs = [j for j in jobs if ((j.get("metadata") or {}).get("name")) != job.name]
        reserved = [r for r in reserved if r.name != job.name]
    return census(jobs, now, gate.finalizer_grace_seconds, reserved=reserved, memo=memo)


def as_unfinished(job: JobRequest, now: datetime) -> JobRef:
    """``job`` as the census will see it once stored: unfinished, created ``now``."""
    return JobRef(
        name=job.name,
        namespace=job.namespace,
        app=job.app,
        job_id=job.job_id,
        uid="",
        resource_version="",
        created=now,
        orphaned_since="",
        stages=job.stages,
        uses=job.uses,
    )


def _joins_active(job: JobRequest, seen: Census) -> bool:
    return bool(job.job_id) and seen.is_active(job.job_id)


def lease_needed(job: JobRequest, seen: Census) -> bool:
    """After the census LIST: does ``job`` still need Gate A (and so the Lease)?"""
    return job.app == FINALIZER_APP or job.holder_work or not _joins_active(job, seen)


def decide(
    job: JobRequest,
    observed: Observed,
    gate: GateSettings,
    rules: RuleSettings,
    now: datetime,
    identities: SubmitterIdentities | None = None,
) -> Decision:
    """Admit or refuse ``job`` given what was observed."""
    if not _judged(job):
        return admit("not_gated")
    refused = _refused_on_request(job)
    if refused is not None:
        return refused
    if job.holder_work and not job.stages:
        # Nothing to count: the holder's import-queries / cloud-split Job.
        gate_a = _gate_a(job, observed.lease, gate, now, identities or SubmitterIdentities())
        return gate_a or admit("holder_setup")
    seen = observed.census
    if seen is None:
        raise ValueError("decide() needs the census for a gated Job (see reads_needed)")
    twin = _near_miss_id(job, seen)
    if twin is not None:
        return twin
    joins = _joins_active(job, seen)
    facts: dict[str, Any] = {
        "job_id": job.job_id,
        "active": list(seen.active_ids),
        "ceiling": gate.max_run_concurrency,
    }
    if lease_needed(job, seen):
        gate_a = _gate_a(job, observed.lease, gate, now, identities or SubmitterIdentities())
        if gate_a is not None:
            return gate_a
    soft = _Rules()
    if rules.feasibility != "off":
        seen_nodes = _nodes(observed)
        blocked = soft.apply(
            rules.feasibility,
            feasibility(job.ref, job.body, job.pod, seen_nodes, rules, opens=not joins),
        )
        if blocked is not None:
            return blocked
    if job.holder_work or joins:
        blocked = soft.apply(rules.db_staging, _db_staging(job, seen, opens=False))
        if blocked is not None:
            return blocked
        return soft.admit("holder_setup" if job.holder_work else "joins_active", **facts)
    split = _split_holder(observed.lease, identities)
    if split is not None:
        # A split shard (docs/design.md "Split searches"): its path bounds the shards,
        # so neither Gate B nor the capacity rule refuses it; it is still counted.
        facts["split"] = split.holder_prefix
        blocked = soft.apply(rules.db_staging, _db_staging(job, seen, opens=True))
        if blocked is not None:
            return blocked
        return soft.admit("split_shard", **facts)
    if seen.count >= gate.max_run_concurrency:
        ids = ", ".join(seen.active_ids)
        return refuse(
            429,
            "ceiling",
            f"Gate B: {seen.count}/{gate.max_run_concurrency} searches already active in "
            f"namespace {job.namespace} ({ids}), so {job.ref} cannot open another. Retry when one "
            f"of {ids} completes.{_split_hint(observed.lease, identities)}",
            **facts,
        )
    effective: int | None = None
    if rules.capacity != "off":
        refusal, ceiling = capacity(
            job.ref, job.namespace, seen.active_ids, job.app, job.pod, _nodes(observed), gate, rules
        )
        if ceiling is not None:
            effective = facts["effective_ceiling"] = ceiling.effective  # and in the log line
        blocked = soft.apply(rules.capacity, refusal)
        if blocked is not None:
            return replace(blocked, ceiling=effective)
    blocked = soft.apply(rules.db_staging, _db_staging(job, seen, opens=True))
    if blocked is not None:
        return replace(blocked, ceiling=effective)
    return replace(soft.admit("ok", **facts), ceiling=effective)


def _split_holder(
    lease_obj: Mapping[str, Any] | None, identities: SubmitterIdentities | None
) -> SplitHolder | None:
    """The split holder whose shard the Lease's holder is opening: the holder identity
    carries its prefix and the webhook's stamp names one of its users."""
    if identities is None or not isinstance(lease_obj, Mapping):
        return None
    lease = LeaseView.from_dict(lease_obj)
    return identities.split_holder(lease.holder, lease.holder_user) if lease.held else None


def _split_hint(lease_obj: Mapping[str, Any] | None, identities: SubmitterIdentities | None) -> str:
    """For a Gate B refusal under a holder that looks like a split's but is not one."""
    if identities is None or not isinstance(lease_obj, Mapping):
        return ""
    lease = LeaseView.from_dict(lease_obj)
    split = identities.split_prefix(lease.holder) if lease.held else None
    if split is None:
        return ""
    return (
        f" The Lease holder {lease.holder} carries split prefix {split.holder_prefix}, but "
        f"its stamped user {lease.holder_user or '(none)'} is not one of that split holder's "
        f"users, so this is not admitted as a split shard (splitHolders in {IDENTITIES_VAR})."
    )


def _nodes(observed: Observed) -> NodesSeen:
    if observed.nodes is None:
        raise ValueError("decide() needs the nodes for a node rule (see node_rules_on)")
    return observed.nodes


class _Rules:
    """The rules beyond the two gates, each ``deny``, ``warn`` or ``off``: a ``warn``
    refusal is carried on the final admit as a warning instead of refusing."""

    def __init__(self) -> None:
        self.warned: list[Decision] = []

    def apply(self, mode: RuleMode, refusal: Decision | None) -> Decision | None:
        """The refusal to return now, if the rule refuses in ``deny`` mode."""
        if refusal is None or mode == "off":
            return None
        if mode == "warn":
            self.warned.append(refusal)
            return None
        return refusal

    def admit(self, reason: str, **facts: Any) -> Decision:
        return admit(reason, **facts).with_warned(*self.warned)


def _search_key(job: JobRequest) -> str:
    return job.job_id or f"{job.app}/{job.name}"


def _db_staging(job: JobRequest, seen: Census, *, opens: bool) -> Decision | None:
    """429 ``db_staging`` when this Job would stage or read a database another
    search is staging (or stage one another search uses): see :mod:`elbgate.db_staging`."""
    conflict = staging_conflict(_search_key(job), job.stages, job.uses, seen, opens=opens)
    if conflict is None:
        return None
    dbs, others = ", ".join(conflict.dbs), ", ".join(conflict.others)
    wait_jobs = ", ".join(conflict.staging_jobs)
    first = conflict.others[0]
    selector = f"app={SETUP_APP}" + ("" if first.startswith("setup/") else f",elb-job-id={first}")
    watch = f"kubectl get jobs -n {job.namespace} -l {selector}"
    retry = f"Retry when {wait_jobs} complete ({watch})."
    if conflict.kind == "use_while_staged":
        why = (
            f"database {dbs} is being staged by {others}, so {job.ref}, which searches it, "
            "would read a half-copied database"
        )
    elif conflict.kind == "staged_twice":
        why = f"{job.ref} would stage database {dbs}, which {others} is staging already"
    elif conflict.kind == "stage_while_used":
        why = (
            f"{job.ref} would stage database {dbs} while active search {others} uses it "
            "(re-staging under a running search breaks its reads)"
        )
        retry = f"Retry when {others} completes (elb-gate census -n {job.namespace})."
    else:
        why = (
            f"database {dbs} is being staged by {others}, and {job.ref} names no database "
            "(no ELB_DB env, no db label), so elb-gate cannot tell it will not read that one "
            "half-copied"
        )
    return refuse(
        429,
        "db_staging",
        f"DB staging: {why}; one staging per database at a time. {retry}",
        dbs=list(conflict.dbs),
        others=list(conflict.others),
        conflict=conflict.kind,
    )


def _gate_a(
    job: JobRequest,
    lease_obj: Mapping[str, Any] | None,
    gate: GateSettings,
    now: datetime,
    identities: SubmitterIdentities,
) -> Decision | None:
    """``None`` when the requester holds the Lease in force, else the 403 denial."""
    user = job.requester.username
    acquire = f"acquire Lease {job.lease_ref} before running elastic-blast submit"
    if lease_obj is None:
        return refuse(
            403,
            "no_lease",
            f"Gate A: Lease {job.lease_ref} does not exist, so user {user} does not hold it; "
            f"{job.ref} refused. Fix: {acquire}.",
        )
    lease = LeaseView.from_dict(lease_obj)
    if not lease.held:
        return refuse(
            403,
            "no_lease",
            f"Gate A: Lease {job.lease_ref} is not held by anyone, so user {user} does not hold "
            f"it; {job.ref} refused. Fix: {acquire}.",
        )
    expiry = expiry_phrase(lease, gate, now)
    if gate.expiry.passed(lease, now):
        return refuse(
            403,
            "lease_expired",
            f"Gate A: Lease {job.lease_ref} held by {holder_phrase(lease)} {expiry} on elb-gate's "
            f"clock; {job.ref} refused. Fix: renew or re-acquire the Lease before creating Jobs.",
            holder=lease.holder,
        )
    if holds(lease, job.requester, identities).matched:
        return None
    return refuse(
        403,
        "not_holder",
        f"Gate A: user {user} does not hold Lease {job.lease_ref}: it is held by "
        f"{holder_phrase(lease)} and {expiry}; {job.ref} refused. Fix: "
        f"{acquire}, or {_mapping_hint(lease, user, identities)}.",
        holder=lease.holder,
        holder_user=lease.holder_user,
    )


def _mapping_hint(lease: LeaseView, user: str, identities: SubmitterIdentities) -> str:
    """How to tell elb-gate that ``user`` and the holder are one submit path."""
    sub = identities.for_holder(lease.holder)
    if sub is not None:
        return (
            f"if {user} runs submit path `{sub.name}`, map user {user} to submitter "
            f"`{sub.name}` in {IDENTITIES_VAR}"
        )
    other = lease.holder_user or "the holder's user"
    source = holder_source(lease.holder)
    prefix = f"holderPrefix {source}-" if source else f"a holderPrefix of {lease.holder}"
    return (
        f"if {user} and {other} are one submit path, map both to one submitter "
        f"({prefix}) in {IDENTITIES_VAR}"
    )

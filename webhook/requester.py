"""Who is asking, and whether that is the Lease holder (Gate A's identity test).

One rule, used by search admission (may this user open a search?) and by the
Lease guard (may this user renew or release?): the requester "is" the holder
when it is the stamped ``elb-gate.io/holder-user``, or when the holder
identity and the requester belong to one configured submitter.
"""

from __future__ import annotations

from dataclasses import dataclass

from elbgate.identities import Submitter, SubmitterIdentities
from elbgate.lease import LeaseView
from elbgate.names import SA_POD_NAME_EXTRA, SA_POD_UID_EXTRA, SA_USER_PREFIX
from webhook.review import UserInfo


@dataclass(frozen=True, slots=True)
class Requester:
    """The authenticated user of one admission request."""

    username: str
    groups: tuple[str, ...] = ()
    pod: str = ""
    """``<ns>/<pod>/<uid>`` from a bound service-account token, ``""`` otherwise."""

    @classmethod
    def from_user_info(cls, info: UserInfo) -> Requester:
        return cls(info.username, info.groups, pod_stamp(info))


def pod_stamp(info: UserInfo) -> str:
    """``<ns>/<pod>/<uid>`` of the pod whose bound token made the request, when the
    token says (``userInfo.extra`` pod-name and pod-uid of a service account)."""
    pod, uid = info.first_extra(SA_POD_NAME_EXTRA), info.first_extra(SA_POD_UID_EXTRA)
    if not (pod and uid and info.username.startswith(SA_USER_PREFIX)):
        return ""
    namespace = info.username[len(SA_USER_PREFIX) :].split(":", 1)[0]
    return f"{namespace}/{pod}/{uid}" if namespace else ""


@dataclass(frozen=True, slots=True)
class HolderMatch:
    """Why a requester counts as the holder (``via`` = ``holder-user`` or
    ``submitter <name>``), or why not (``matched`` False)."""

    matched: bool
    via: str = ""


def holds(lease: LeaseView, requester: Requester, identities: SubmitterIdentities) -> HolderMatch:
    """Is ``requester`` the holder of ``lease`` (ignoring expiry)?"""
    if not lease.held:
        return HolderMatch(False)
    if lease.holder_user and lease.holder_user == requester.username:
        return HolderMatch(True, "holder-user")
    sub = identities.same_submitter(lease.holder, requester.username, requester.groups)
    if sub is not None:
        return HolderMatch(True, f"submitter {sub.name}")
    return HolderMatch(False)


def reserving_submitter(
    holder: str, requester: Requester, identities: SubmitterIdentities
) -> Submitter | None:
    """The submitter whose ``holderPrefix`` ``holder`` carries when ``requester`` is
    not one of its users: such a holder identity may not be taken by them, or the
    prefix could be borrowed to pass the same-submitter test."""
    sub = identities.for_holder(holder)
    if sub is None or sub.owns_user(requester.username, requester.groups):
        return None
    return sub

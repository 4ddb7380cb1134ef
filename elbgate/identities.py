"""Submitter identities: which credentials belong to one submit path.

A submit path may take the Lease with one credential and create Jobs with
another (the dashboard's Lease client vs. its ``kubectl apply``). Operators
map a holder prefix to the users and groups of that path::

    submitters:
      - name: dashboard
        holderPrefix: dashboard-
        users: [dashboard-lease, system:serviceaccount:blast:dashboard]
        groups: [blast-dashboard]

A requester "is" the Lease holder when it is the stamped ``holder-user``, or
when the holder identity and the requester both belong to one submitter.

*Split holders* (``splitHolders``): a holder-identity prefix a submit path uses for
the shards of one split search (the dashboard's storage-query split takes the Lease
as ``dashboard-split-<uuid>`` for each shard's ``elastic-blast submit``), and the
Kubernetes users allowed to use it::

    splitHolders:
      - holderPrefix: dashboard-split-
        submitter: dashboard      # that submitter's users
        users: [dashboard-lease]  # and/or users named here

A Lease is a split holder's only when its holder identity carries the prefix AND
its stamped ``holder-user`` (the webhook's stamp, never the client's word) is one
of those users: the holder string alone proves nothing. Users only, because the
stamp records a username, not groups. Absent, the key defaults to
:data:`DEFAULT_SPLIT_HOLDERS` (the users of a submitter named ``dashboard``, if
any); ``splitHolders: []`` turns splits off.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class IdentityConfigError(ValueError):
    """The submitter-identity file is unreadable or malformed."""


@dataclass(frozen=True, slots=True)
class Submitter:
    name: str
    holder_prefix: str
    users: frozenset[str]
    groups: frozenset[str]

    def owns_holder(self, holder: str) -> bool:
        return bool(self.holder_prefix) and holder.startswith(self.holder_prefix)

    def owns_user(self, username: str, groups: Iterable[str]) -> bool:
        return username in self.users or not self.groups.isdisjoint(groups)


DEFAULT_SPLIT_HOLDERS: tuple[Mapping[str, Any], ...] = (
    {"holderPrefix": "dashboard-split-", "submitter": "dashboard"},
)
"""``splitHolders`` when the file does not say: the dashboard's split fan-out."""


@dataclass(frozen=True, slots=True)
class SplitHolder:
    """Holder identities ``holder_prefix…`` stamped with one of ``users`` open split shards."""

    holder_prefix: str
    users: frozenset[str]

    def owns(self, holder: str, holder_user: str) -> bool:
        return holder.startswith(self.holder_prefix) and holder_user in self.users


@dataclass(frozen=True, slots=True)
class SubmitterIdentities:
    submitters: tuple[Submitter, ...] = ()
    split_holders: tuple[SplitHolder, ...] = ()

    def split_holder(self, holder: str, holder_user: str) -> SplitHolder | None:
        """The split holder a Lease held by ``holder`` and stamped ``holder_user``
        belongs to (longest prefix wins), or ``None``. An empty stamp never matches."""
        if not holder_user:
            return None
        owners = [s for s in self.split_holders if s.owns(holder, holder_user)]
        return max(owners, key=lambda s: len(s.holder_prefix)) if owners else None

    def split_prefix(self, holder: str) -> SplitHolder | None:
        """The split holder whose prefix ``holder`` carries, whoever stamped it
        (for a denial's hint only: it grants nothing)."""
        owners = [s for s in self.split_holders if holder.startswith(s.holder_prefix)]
        return max(owners, key=lambda s: len(s.holder_prefix)) if owners else None

    def for_holder(self, holder: str) -> Submitter | None:
        """The submitter whose prefix the holder identity carries (longest prefix wins)."""
        owners = [s for s in self.submitters if s.owns_holder(holder)]
        return max(owners, key=lambda s: len(s.holder_prefix)) if owners else None

    def same_submitter(self, holder: str, username: str, groups: Iterable[str]) -> Submitter | None:
        """The submitter that both the holder identity (by prefix) and the requester
        (by user or group) belong to, if any. The Lease guard refuses a holder
        identity with a submitter's prefix taken by anyone outside that submitter,
        so the prefix cannot be borrowed to pass this test."""
        sub = self.for_holder(holder)
        return sub if sub is not None and sub.owns_user(username, groups) else None

    def for_requester(self, username: str, groups: Iterable[str]) -> Submitter | None:
        """The first submitter the requester belongs to (by user or group): its submit
        path, as fair turns name it."""
        member = tuple(groups)
        return next((s for s in self.submitters if s.owns_user(username, member)), None)

    @classmethod
    def parse(cls, doc: Any) -> SubmitterIdentities:
        if doc is None:
            return cls(split_holders=_split_holders(DEFAULT_SPLIT_HOLDERS, (), default=True))
        if not isinstance(doc, Mapping) or not isinstance(doc.get("submitters", []), list):
            raise IdentityConfigError("expected a mapping with a 'submitters' list")
        out = []
        for i, entry in enumerate(doc.get("submitters") or []):
            if not isinstance(entry, Mapping):
                raise IdentityConfigError(f"submitters[{i}] is not a mapping")
            name = entry.get("name")
            prefix = entry.get("holderPrefix")
            users = entry.get("users") or []
            groups = entry.get("groups") or []
            if not isinstance(name, str) or not name:
                raise IdentityConfigError(f"submitters[{i}].name must be a non-empty string")
            if not isinstance(prefix, str) or not prefix:
                raise IdentityConfigError(
                    f"submitters[{i}].holderPrefix must be a non-empty string"
                )
            if not _strings(users) or not _strings(groups) or not (users or groups):
                raise IdentityConfigError(
                    f"submitters[{i}] ({name}) needs 'users' and/or 'groups' as lists of strings"
                )
            out.append(Submitter(name, prefix, frozenset(users), frozenset(groups)))
        if "splitHolders" in doc:
            splits = doc.get("splitHolders") or []
            if not isinstance(splits, list):
                raise IdentityConfigError("'splitHolders' must be a list")
            return cls(tuple(out), _split_holders(splits, out, default=False))
        return cls(tuple(out), _split_holders(DEFAULT_SPLIT_HOLDERS, out, default=True))

    @classmethod
    def load(cls, path: str) -> SubmitterIdentities:
        """Read the file named by ``ELB_GATE_SUBMITTER_IDENTITIES_FILE`` (``""`` = none)."""
        if not path:
            return cls.parse(None)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise IdentityConfigError(f"cannot read {path}: {exc.strerror}") from None
        try:
            doc = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise IdentityConfigError(f"{path} is not valid YAML/JSON: {exc}") from None
        try:
            return cls.parse(doc)
        except IdentityConfigError as exc:
            raise IdentityConfigError(f"{path}: {exc}") from None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _split_holders(
    entries: Any, submitters: Iterable[Submitter], *, default: bool
) -> tuple[SplitHolder, ...]:
    """Resolve ``splitHolders`` entries to users. The default names a submitter that
    may not exist (then it grants nothing); an entry the operator wrote must resolve
    to at least one user, or it is refused."""
    by_name = {s.name: s for s in submitters}
    out = []
    for i, entry in enumerate(entries):
        where = f"splitHolders[{i}]"
        if not isinstance(entry, Mapping):
            raise IdentityConfigError(f"{where} is not a mapping")
        prefix = entry.get("holderPrefix")
        if not isinstance(prefix, str) or not prefix:
            raise IdentityConfigError(f"{where}.holderPrefix must be a non-empty string")
        users = entry.get("users") or []
        if not _strings(users) and users != []:
            raise IdentityConfigError(f"{where}.users must be a list of strings")
        if "groups" in entry:
            raise IdentityConfigError(
                f"{where} lists groups: a split holder is recognised by the Lease's stamped "
                "holder-user, a username, so only 'users' (or 'submitter') can be checked"
            )
        allowed = set(users)
        name = entry.get("submitter")
        if name is not None:
            sub = by_name.get(name) if isinstance(name, str) else None
            if sub is None and not default:
                raise IdentityConfigError(f"{where}.submitter {name!r} is not in 'submitters'")
            if sub is not None:
                allowed |= sub.users
        if not allowed:
            if default:
                continue
            raise IdentityConfigError(
                f"{where} ({prefix}) allows no user: list 'users', or name a 'submitter' that "
                "lists users (groups cannot be checked against the stamped holder-user)"
            )
        out.append(SplitHolder(prefix, frozenset(allowed)))
    return tuple(out)

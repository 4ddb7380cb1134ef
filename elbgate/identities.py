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


@dataclass(frozen=True, slots=True)
class SubmitterIdentities:
    submitters: tuple[Submitter, ...] = ()

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

    @classmethod
    def parse(cls, doc: Any) -> SubmitterIdentities:
        if doc is None:
            return cls()
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
        return cls(tuple(out))

    @classmethod
    def load(cls, path: str) -> SubmitterIdentities:
        """Read the file named by ``ELB_GATE_SUBMITTER_IDENTITIES_FILE`` (``""`` = none)."""
        if not path:
            return cls()
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

"""Users and their bearer tokens (authentication only; there is no RBAC)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class User:
    """An authenticated identity, as the apiserver puts it in AdmissionReview `userInfo`."""

    name: str
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False)
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    @classmethod
    def plain(
        cls,
        name: str,
        groups: list[str] | tuple[str, ...] = (),
        *,
        uid: str = "",
        extra: dict[str, list[str]] | None = None,
        token: str | None = None,
    ) -> User:
        """A user whose username is `name`; `system:authenticated` is always added."""
        all_groups = tuple(groups) + (
            ("system:authenticated",) if "system:authenticated" not in groups else ()
        )
        return cls(name, name, uid, all_groups, dict(extra or {}),
                   token or secrets.token_hex(16))

    @classmethod
    def service_account(
        cls,
        namespace: str,
        name: str,
        *,
        pod: str | None = None,
        pod_uid: str | None = None,
        uid: str = "",
        token: str | None = None,
    ) -> User:
        """A bound service-account token user (`system:serviceaccount:NS:NAME`).

        Helpers refer to it by the SA name (`emu.kubeconfig("openapi")`); `pod`/`pod_uid`
        become the `authentication.kubernetes.io/pod-*` extra of a bound token.
        """
        extra: dict[str, list[str]] = {}
        if pod:
            extra["authentication.kubernetes.io/pod-name"] = [pod]
        if pod_uid:
            extra["authentication.kubernetes.io/pod-uid"] = [pod_uid]
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                  "system:authenticated")
        return cls(name, f"system:serviceaccount:{namespace}:{name}", uid, groups, extra,
                   token or secrets.token_hex(16))

    @classmethod
    def admin(cls) -> User:
        return cls("admin", "admin", "", ("system:masters", "system:authenticated"), {},
                   secrets.token_hex(16))

    def user_info(self) -> dict[str, Any]:
        """AdmissionReview `request.userInfo`."""
        info: dict[str, Any] = {"username": self.username}
        if self.uid:
            info["uid"] = self.uid
        info["groups"] = list(self.groups)
        if self.extra:
            info["extra"] = {k: list(v) for k, v in self.extra.items()}
        return info

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> User:
        """A users.yaml entry: {name, token?, groups, extra, serviceAccount: {...}}."""
        sa = data.get("serviceAccount")
        if sa:
            user = cls.service_account(sa["namespace"], sa.get("name", data["name"]),
                                       pod=sa.get("pod"), pod_uid=sa.get("podUid"),
                                       token=data.get("token"))
            return User(data["name"], user.username, user.uid, user.groups,
                        {**user.extra, **(data.get("extra") or {})}, user.token)
        return cls.plain(data["name"], data.get("groups") or [], uid=data.get("uid", ""),
                         extra=data.get("extra"), token=data.get("token"))

"""Users added while the server runs: nobody else's requests notice."""

from __future__ import annotations

import threading

from tests.emulator.rest import call
from tests.kube_emulator import Emulator, User


def test_adding_users_concurrently_never_refuses_an_existing_token(emulator: Emulator) -> None:
    errors: list[BaseException] = []

    def add(prefix: str) -> None:
        try:
            for n in range(40):
                emulator.add_user(User.plain(f"{prefix}-{n}"))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    adders = [threading.Thread(target=add, args=(f"u{i}",)) for i in range(4)]
    for t in adders:
        t.start()
    statuses = [call(emulator, "GET", "/api/v1/namespaces").status for _ in range(60)]
    for t in adders:
        t.join(30)
    assert errors == []
    assert set(statuses) == {200}
    for name in ("u0-0", "u3-39"):
        assert call(emulator, "GET", "/api/v1/namespaces", user=name).status == 200

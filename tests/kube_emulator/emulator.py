"""`Emulator`: the API server in a background thread, plus synchronous helpers for tests."""

from __future__ import annotations

import asyncio
import copy
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from aiohttp import web

from .admission import AdmissionChain, Services
from .defaults import apply_defaults
from .faults import Faults
from .resources import Obj, by_plural, for_object
from .selectors import parse_field_selector, parse_label_selector
from .server import ServerState, create_app
from .store import Store
from .tls import ServingCerts, write_kubeconfig
from .users import User

INITIAL_NAMESPACES = ("default", "kube-system")


class Emulator:
    """A small, faithful Kubernetes API server for tests.

    The server runs on its own event loop in a daemon thread, so tests may block (e.g. on
    `subprocess.run(["kubectl", ...])`) while it serves. Helpers (`create`, `get`, ...) act on
    the store directly: they bypass admission but assign resourceVersions and notify watches.
    """

    def __init__(
        self,
        users: Iterable[User] = (),
        *,
        port: int = 0,
        http_port: int | None = None,
        state_dir: str | Path | None = None,
        history: int = 10_000,
        bookmark_interval: float = 1.0,
    ) -> None:
        self.store = Store(history)
        self.services: Services = {}
        self.faults = Faults()
        self.users: dict[str, User] = {"admin": User.admin()}
        self._users_lock = threading.Lock()
        for user in users:
            self.users[user.name] = user
        self._own_dir = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="kube-emulator-"))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.certs = ServingCerts(self.state_dir)
        self._port, self._http_port = port, http_port
        self._state = ServerState(self.store, {}, AdmissionChain(self.store, self.services),
                                  self.faults, bookmark_interval=bookmark_interval)
        self._sync_tokens()
        self.url = ""
        self.http_url: str | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        for ns in INITIAL_NAMESPACES:
            self.store.create(by_plural("namespaces"), {"metadata": {"name": ns}})

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> Emulator:
        """Bind 127.0.0.1 (HTTPS; HTTP too if `http_port` was given) and serve. Returns self."""
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("kube emulator failed to start") from self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner = web.AppRunner(create_app(self._state), access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self._port,
                          ssl_context=self.certs.server_context()).start()
        port = runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"
        self._state.address = f"127.0.0.1:{port}"
        if self._http_port is not None:
            await web.TCPSite(runner, "127.0.0.1", self._http_port).start()
            self.http_url = f"http://127.0.0.1:{runner.addresses[1][1]}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            for queue in list(self._state.watches):
                queue.put_nowait(None)
            await runner.cleanup()

    def stop(self) -> None:
        """Stop serving (open watches end) and join the thread."""
        if self.loop is not None and self._stop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)
        self._thread = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def open_watches(self) -> int:
        """How many watch streams are being served right now."""
        return len(self._state.watches)

    @property
    def bookmark_interval(self) -> float:
        """Seconds between BOOKMARK events on watches that allow them."""
        return self._state.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self._state.bookmark_interval = seconds

    # -- users and client configuration --------------------------------------

    def _sync_tokens(self) -> None:
        self._state.users.clear()
        self._state.users.update({u.token: u for u in self.users.values()})

    def add_user(self, user: User) -> User:
        """Add (or replace) a user while the server runs. The token map is updated
        entry by entry, never cleared: requests being authenticated on the server's
        thread must not see it empty (a spurious 401) or changing size mid-iteration."""
        with self._users_lock:
            old = self.users.get(user.name)
            self.users[user.name] = user
            self._state.users[user.token] = user
            if old is not None and old.token != user.token:
                self._state.users.pop(old.token, None)
        return user

    @property
    def ca_file(self) -> str:
        """The CA (PEM) that signed the serving certificate."""
        return str(self.certs.ca_file)

    @property
    def ca_pem(self) -> bytes:
        return self.certs.ca_pem

    def token(self, user: str = "admin") -> str:
        return self.users[user].token

    def kubeconfig(self, user: str = "admin", namespace: str = "default") -> str:
        """Path of a kubeconfig for `user` (written on first use; call after start())."""
        path = self.state_dir / f"kubeconfig-{user}"
        if not path.exists():
            write_kubeconfig(path, self.url, self.ca_pem, self.users[user], namespace)
        return str(path)

    # -- direct store access (no admission) ----------------------------------

    def create(self, obj: Obj) -> Obj:
        """Create `obj` as given (status too; namespace defaults to "default")."""
        rt = for_object(obj)
        obj = copy.deepcopy(obj)
        if rt.namespaced:
            obj.setdefault("metadata", {}).setdefault("namespace", "default")
        prepared = apply_defaults(rt, self.store.prepare_create(rt, apply_defaults(rt, obj)))
        if "status" in obj:
            prepared["status"] = obj["status"]
        return self.store.commit_create(rt, prepared)

    def get(self, resource: str, namespace: str | None, name: str) -> Obj:
        """The object, or ApiError(404)."""
        return self.store.get(by_plural(resource), namespace, name)

    def find(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        """The object, or None."""
        return self.store.find(by_plural(resource), namespace, name)

    def list(self, resource: str, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None) -> list[Obj]:
        rt = by_plural(resource)
        items, _ = self.store.select(rt, namespace, parse_label_selector(label_selector),
                                   parse_field_selector(field_selector))
        return items

    def update(self, obj: Obj) -> Obj:
        """Replace the object (status kept, as the apiserver does); honours a given RV."""
        rt = for_object(obj)
        return self.store.update(rt, apply_defaults(rt, copy.deepcopy(obj)))

    def update_status(self, obj: Obj) -> Obj:
        """Write only the status (the `status` subresource)."""
        return self.store.update(for_object(obj), obj, subresource="status")

    def patch(self, resource: str, namespace: str | None, name: str,
              fn: Callable[[Obj], Any]) -> Obj:
        """Read-modify-write: `fn` edits the object in place (status edits included)."""
        rt = by_plural(resource)
        with self.store.lock:
            obj = self.store.get(rt, namespace, name)
            fn(obj)
            result = self.store.update(rt, obj)
            if rt.status_subresource and "status" in obj:
                result = self.store.update(rt, {**result, "status": obj["status"]},
                                           subresource="status")
            return result

    def delete(self, resource: str, namespace: str | None, name: str) -> Obj:
        obj, _ = self.store.delete(by_plural(resource), namespace, name)
        return obj

    def compact(self) -> None:
        """Forget watch history: the next watch from an older RV gets 410 Expired."""
        self.store.compact()

    def subscribe(self, fn: Callable[[str, str, Obj], None]) -> Callable[[], None]:
        """Call fn(event_type, resource, obj) after every committed write, in commit order."""
        return self.store.subscribe(fn)

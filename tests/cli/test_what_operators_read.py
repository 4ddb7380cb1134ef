"""What an operator reads from the real ``elb-gate`` and ``python -m certs``
processes: help without docstring markup, each command's own exit codes, the
kubeconfig lookup order as docs/cli.md states it, and errors that name the real
cause (a missing file by its path; a server that is not a Kubernetes API server
is not a namespace that does not exist)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from client.cli import exit_codes
from client.cli.connection import KUBECONFIG_ORDER
from testbed.component import host_env

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "cli.md"
MARKUP = re.compile(r"``|:(func|mod|class|meth):`")

COMMANDS = {
    "submit": {"COMMAND's code", "69", "75", "76", "78", "124", "126", "127", "130/143", "2"},
    "census": {"66", "69", "78", "2"},
    "lease": {"1", "66", "69", "78", "2"},
    "lease status": {"66", "69", "78", "2"},
    "lease release": {"1", "66", "69", "78", "2"},
}
"""The exit codes each command can end with (docs/cli.md's table, per command)."""


def _env(**extra: str) -> dict[str, str]:
    env = host_env()
    env.pop("KUBECONFIG", None)
    return {**env, **extra}


def _run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def _help(command: str) -> str:
    done = _run("-m", "client", *command.split(), "--help")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _codes_listed(text: str) -> set[str]:
    table = text.split("exit codes:\n", 1)[1]
    return {
        re.split(r"\s{2,}", line.strip())[0] for line in table.splitlines() if line.startswith("  ")
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "client", "--help"],
        ["-m", "client", "lease", "--help"],
        ["-m", "client", "lease", "status", "--help"],
        ["-m", "client", "lease", "release", "--help"],
        ["-m", "client", "census", "--help"],
        ["-m", "client", "submit", "--help"],
        ["-m", "certs", "--help"],
        ["-m", "certs", "generate", "--help"],
        ["-m", "certs", "status", "--help"],
    ],
    ids=" ".join,
)
def test_help_shows_no_docstring_markup(argv: list[str]) -> None:
    done = _run(*argv)
    assert done.returncode == 0, done.stderr
    assert not MARKUP.search(done.stdout), done.stdout


@pytest.mark.parametrize("action", ["status", "release"])
def test_each_lease_action_has_a_description(action: str) -> None:
    text = _help(f"lease {action}")
    description = text.split("\n\n")[1]
    assert not description.startswith(("options:", "positional arguments:")), text
    assert len(description.split()) >= 8, description


@pytest.mark.parametrize("command", ["census", "lease status"])
def test_the_output_flag_says_what_it_does(command: str) -> None:
    text = " ".join(_help(command).split())
    (said,) = re.findall(r"-o \{table,json,yaml\}, --output \{table,json,yaml\} ([^-]+)", text)
    assert "table" in said and "JSON" in said and "YAML" in said, said


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_subcommand_lists_only_its_own_exit_codes(command: str) -> None:
    assert _codes_listed(_help(command)) == COMMANDS[command]


def test_the_top_level_help_lists_every_exit_code() -> None:
    every = {code for code, _, _ in exit_codes.TABLE}
    assert _codes_listed(_help("")) == every == set().union(*COMMANDS.values())


def test_help_and_docs_state_the_same_kubeconfig_lookup_order() -> None:
    help_text = " ".join(_help("census").split())
    docs = " ".join(DOCS.read_text().split())
    assert f"(default: {KUBECONFIG_ORDER})" in help_text
    assert f"API access: --kubeconfig, else {KUBECONFIG_ORDER}." in docs.replace("`", "")


@pytest.mark.parametrize("how", ["flag", "KUBECONFIG", "home"])
def test_a_missing_kubeconfig_file_says_so_by_its_path(tmp_path: Path, how: str) -> None:
    missing = tmp_path / "no-such.kubeconfig"
    if how == "flag":
        done = _run("-m", "client", "--kubeconfig", str(missing), "census")
    elif how == "KUBECONFIG":
        done = _run("-m", "client", "census", KUBECONFIG=str(missing))
    else:
        missing = tmp_path / ".kube" / "config"
        done = _run("-m", "client", "census", HOME=str(tmp_path))
    assert done.returncode == exit_codes.CONFIG_ERROR
    (line,) = done.stderr.splitlines()
    assert line == (
        f"elb-gate: error: cannot load kubeconfig {missing}: no such file; "
        "set KUBECONFIG or --kubeconfig"
    )


# --- a server that is not the API server ----------------------------------------------


class _PlainServer:
    """A real HTTP server on 127.0.0.1 that answers every request 404, the way a
    web server (or a proxy in front of nothing) does: not a Kubernetes Status."""

    def __init__(self, body: str, content_type: str) -> None:
        self.body, self.content_type = body, content_type
        self.paths: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0

    async def _answer(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        return web.Response(status=404, text=self.body, content_type=self.content_type)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        self.ready.set()

    def __enter__(self) -> _PlainServer:
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the plain server did not start"
        return self

    def _serve(self) -> None:
        self.loop.run_until_complete(self._start())
        self.loop.run_forever()

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture(params=["text", "json"])
def plain_server(request: pytest.FixtureRequest) -> Iterator[_PlainServer]:
    body, content_type = {
        "text": ("404: Not Found", "text/plain"),
        "json": ('{"error": "not found"}', "application/json"),
    }[request.param]
    with _PlainServer(body, content_type) as server:
        yield server


@pytest.mark.parametrize("command", [["census"], ["lease", "status"]])
def test_a_404_from_a_server_that_is_not_the_api_server_is_not_namespace_not_found(
    tmp_path: Path, plain_server: _PlainServer, command: list[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""\
apiVersion: v1
kind: Config
clusters:
- name: web
  cluster: {{server: "http://127.0.0.1:{plain_server.port}"}}
users:
- name: someone
  user: {{token: abc}}
contexts:
- name: web
  context: {{cluster: web, user: someone, namespace: blast}}
current-context: web
"""
    )
    done = _run("-m", "client", "--kubeconfig", str(kubeconfig), *command)
    assert plain_server.paths == ["/api/v1/namespaces/blast"]
    assert done.returncode == exit_codes.COORDINATION_ERROR, done.stderr
    (line,) = done.stderr.splitlines()
    assert 'namespace "blast" not found' not in line
    assert plain_server.body in line
    assert f"http://127.0.0.1:{plain_server.port}" in line
    assert "not a Kubernetes API server" in line and "kubeconfig" in line

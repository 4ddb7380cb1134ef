"""Run the emulator standalone: `python -m tests.kube_emulator --port 6443 --state-dir DIR`."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

import yaml

from .emulator import Emulator
from .users import User


def _service(text: str) -> tuple[tuple[str, str], tuple[str, int]]:
    try:
        ref, target = text.split("=", 1)
        namespace, name = ref.split("/", 1)
        host, port = target.rsplit(":", 1)
        return (namespace, name), (host, int(port))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NS/NAME=HOST:PORT, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kube_emulator",
                                     description="A small Kubernetes API emulator for tests.")
    parser.add_argument("--port", type=int, default=6443, help="HTTPS port on 127.0.0.1")
    parser.add_argument("--http-port", type=int, default=None, help="also serve plain HTTP")
    parser.add_argument("--state-dir", type=Path, required=True,
                        help="where ca.crt and kubeconfig-<user> are written")
    parser.add_argument("--users", type=Path, default=None,
                        help="YAML list of {name, token?, groups, extra, serviceAccount}")
    parser.add_argument("--service", type=_service, action="append", default=[],
                        metavar="NS/NAME=HOST:PORT", help="where a webhook Service points")
    args = parser.parse_args(argv)

    users = [User.from_dict(entry) for entry in
             (yaml.safe_load(args.users.read_text()) or [] if args.users else [])]
    emu = Emulator(users, port=args.port, http_port=args.http_port, state_dir=args.state_dir)
    for ref, target in args.service:
        emu.services[ref] = target
    emu.start()
    print(f"serving {emu.url}" + (f" and {emu.http_url}" if emu.http_url else ""), flush=True)
    print(f"ca: {emu.ca_file}", flush=True)
    for name in emu.users:
        print(f"kubeconfig ({name}): {emu.kubeconfig(name)}", flush=True)

    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    emu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

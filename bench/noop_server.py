"""The floor for an admission answer: a no-op AdmissionReview handler.

``python -m bench.noop_server --cert C --key K --port P`` serves ``POST /{any}``
over TLS with the webhook's own server set-up (``webhook.tls.ServingCertificate``
for the TLS 1.2+ context, ``web.AppRunner`` without access log, ``TCPSite``),
reads and decodes the body, and answers ``allowed: true`` with the request's
uid. It sets up the runtime as the webhook does (``elbgate.serving.runtime.tune_gc``).
Everything the webhook does beyond this is its policy cost.

With ``--reads KUBECONFIG`` it first makes the reads search admission makes —
the census LIST and the Lease GET of the request's namespace, concurrently,
through ``KubeApi`` and ``elbgate.kube.reads`` — and then allows: admission
minus the policy, in one process, the tightest floor there is.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator

import orjson
from aiohttp import web

from elbgate.kube.api import KubeApi
from elbgate.kube.config import KubeConfig
from elbgate.kube.reads import get_submit_lease, list_unfinished_search_jobs
from elbgate.serving import runtime
from webhook.tls import ServingCertificate

MAX_BYTES = 8 * 1024 * 1024
"""The webhook's default ELB_GATE_MAX_REQUEST_BYTES."""
READ_DEADLINE = 1.5
"""The webhook's default ELB_GATE_API_TIMEOUT_SECONDS."""


API = web.AppKey("api", KubeApi)
DEADLINE = web.AppKey("deadline", float)


async def allow(request: web.Request) -> web.Response:
    """Decode the AdmissionReview and allow it (uid echoed, as any webhook must)."""
    review = orjson.loads(await request.read())
    uid = review["request"]["uid"]
    api = request.app.get(API)
    if api is not None:
        namespace = review["request"]["namespace"]
        deadline = request.app[DEADLINE]
        await asyncio.gather(
            list_unfinished_search_jobs(api, namespace, deadline=deadline),
            get_submit_lease(api, namespace, deadline=deadline),
        )
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def create_app(reads: KubeConfig | None = None, deadline: float = READ_DEADLINE) -> web.Application:
    """The no-op application; with ``reads``, it reads the API before allowing, each read
    under ``deadline`` (as the webhook reads under its API deadline)."""
    app = web.Application(client_max_size=MAX_BYTES + 1)
    app.router.add_post("/{path:.*}", allow)
    app[DEADLINE] = deadline
    if reads is not None:

        async def api_session(app: web.Application) -> AsyncIterator[None]:
            async with KubeApi(reads, timeout=deadline, user_agent="elb-gate-bench") as api:
                app[API] = api
                yield

        app.cleanup_ctx.append(api_session)
    return app


async def serve(
    cert: str, key: str, port: int, reads: KubeConfig | None = None, deadline: float = READ_DEADLINE
) -> None:
    certificate = ServingCertificate(cert, key)
    if not certificate.reload_if_changed():
        raise SystemExit(f"no usable certificate in {cert} / {key}")
    runner = web.AppRunner(create_app(reads, deadline), access_log=None, shutdown_timeout=10.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=certificate.context).start()
    print(f"ready {runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.noop_server")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reads", default=None, metavar="KUBECONFIG", help="read the API first")
    parser.add_argument(
        "--read-deadline",
        type=float,
        default=READ_DEADLINE,
        help="deadline of each read, seconds (the webhook's ELB_GATE_API_TIMEOUT_SECONDS)",
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    reads = KubeConfig.load(args.reads) if args.reads else None
    runtime.tune_gc()  # as python -m webhook does before it serves
    asyncio.run(serve(args.cert, args.key, args.port, reads, args.read_deadline))
    return 0


if __name__ == "__main__":
    sys.exit(main())

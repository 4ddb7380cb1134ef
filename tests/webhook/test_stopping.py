"""A webhook told to stop goes on answering on the connections still open, each answer
closing its connection: the API server keeps using the connections it holds to a
terminating Pod (kubernetes/kubernetes#127335), so one cut while idle can meet a request
on its way ("write: broken pipe": a refused admission during a rollout)."""

from __future__ import annotations

import http.client
import json
import signal

from testbed.controlplane import ControlPlane
from testbed.webhook_process import WebhookProcess
from tests.builders import admission, review, user
from webhook.http import JOBS_PATH

PLAIN_JOB = {"metadata": {"name": "plain", "namespace": "default"}}
REVIEW = json.dumps(
    review(admission("CREATE", PLAIN_JOB, who=user("alice", ("system:authenticated",))))
).encode()


def ask(connection: http.client.HTTPSConnection) -> http.client.HTTPResponse:
    connection.request("POST", JOBS_PATH, REVIEW, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    return answer


def test_a_stopping_webhook_answers_on_an_open_connection_then_closes_it(
    control_plane: ControlPlane,
) -> None:
    with WebhookProcess(control_plane, register=False) as hook:
        pooled = http.client.HTTPSConnection(
            "127.0.0.1", hook.port, context=hook.client_context(), timeout=30
        )
        try:
            first = ask(pooled)
            assert first.status == 200 and first.getheader("Connection") != "close"
            assert hook.process is not None
            hook.process.send_signal(signal.SIGTERM)
            hook.wait_for_log(lambda record: record.get("msg") == "stopping")
            second = ask(pooled)  # the same connection, after the process began to stop
            assert second.status == 200
            assert second.getheader("Connection") == "close"
        finally:
            pooled.close()
        assert hook.process.wait(30) == 0

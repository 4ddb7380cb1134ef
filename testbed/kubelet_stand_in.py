"""What the control plane's kubelet stand-in (``localkube/kubelet.go``) reads: the pod
annotations that say what a pod's imaginary containers do, and the Node label and
annotations that steer a node's kubelet. One name each, for every test and rig.

A Job's pod template carries the pod annotations; a pod without ``RUN_SECONDS`` runs
until deleted (like a finalizer still merging results).
"""

from __future__ import annotations

PREFIX = "localkube.elb-gate.io/"

RUN_SECONDS = PREFIX + "run-seconds"
"""Seconds until the pod's containers exit (absent: they run until the pod is deleted)."""
EXIT_CODE = PREFIX + "exit-code"
"""Their exit code (default 0)."""
EXIT_CODES = PREFIX + "exit-codes"
"""Per attempt, for a Job's successive pods: ``"1,1,0"``."""
STOP_SECONDS = PREFIX + "stop-seconds"
"""Seconds a container takes to exit after SIGTERM (default 1)."""
RESTART = PREFIX + "restart"
"""Change its value to crash the pod's containers once, now."""
RESTART_ONLY = PREFIX + "restart-containers"
"""With ``RESTART``: crash only these containers (comma-separated names)."""

MANAGED = PREFIX + "managed"
"""Node label: the stand-in keeps this Node's status and heartbeat."""
KUBELET = PREFIX + "kubelet"
"""Node annotation: ``not-ready`` (Ready=False) or ``stopped`` (no heartbeat, no status)."""
NODE_INDEX = PREFIX + "index"
"""Node annotation: the node's ordinal, from which its InternalIP is made."""

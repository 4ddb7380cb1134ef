"""elb-gate controller: stale-Lease GC, dead-holder reclaim, orphaned-finalizer GC and the
auto-stop liveness feed. Run with ``python -m controller``.

Layout (one concern per module):

* :mod:`controller.cache` — the lean per-namespace cache the watches feed;
* :mod:`elbgate.kube.informer` — LIST + WATCH loops (410 → relist) that fill it;
* :mod:`controller.reclaim`, :mod:`controller.orphans`, :mod:`controller.liveness` — pure
  planners for each behaviour; :mod:`controller.plan` combines them;
* :mod:`controller.apply` — CAS writes and Events; :mod:`controller.leader` — leader election;
* :mod:`controller.reconciler` — observe → plan → apply per namespace, on events and resync;
* :mod:`controller.http` — ``/healthz``, ``/readyz``, ``/liveness``, ``/metrics``;
* :mod:`controller.server` — wiring, run until cancelled;
* :mod:`controller.__main__` — the command line.
"""

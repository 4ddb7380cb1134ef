"""elb-gate's testbed: a real Kubernetes control plane (``localkube``) and the
tools that run elb-gate on it — for the test suite, ``make run``, the soak runs
and the benchmarks. Never imported by the product (webhook, controller, CLI)."""

"""``make run``: elb-gate end to end on the Kubernetes API emulator (``python -m tests.demo``).

Kept import-free: :mod:`tests.demo.elastic_blast` runs as a child process per search.
"""

"""Benchmarks for elb-gate on a real Kubernetes control plane.

``make bench`` (``python -m bench``) runs the real webhook process against the real
API server (``localkube``) and prints every figure next to the baseline it is compared
with, as a ratio measured in the same run, so the numbers hold on a noisy machine:
admission against its floor, API server requests per search, renewal and resync, the
handoff latency and burst makespan of the submit paths, and the dead-holder reclaim.
See docs/benchmarks.md for the method and the findings.
"""

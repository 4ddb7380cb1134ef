"""Benchmarks for elb-gate: admission cost measured against its physical floor.

``make bench`` (``python -m bench``) runs the real webhook process against the
API emulator over real TLS and prints every figure next to the baseline it is
compared with, as a ratio, so the numbers hold on a noisy machine. See
docs/benchmarks.md for the method and the findings.
"""

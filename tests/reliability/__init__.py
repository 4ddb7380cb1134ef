"""Reliability and security suite: elb-gate's promises, proved with numbers.

Bounded parts run under ``make test`` (``tests/reliability/test_*.py``); the long
runs are ``python -m tests.reliability.soak`` and ``python -m tests.reliability.fuzz``.
"""

"""Reliability and security suite: elb-gate's promises, proved with numbers on the real
control plane.

The bounded runs are these tests (in ``make test``); the long ones are ``make soak``
(``python -m testbed.reliability.soak``: >= 1,000 schedules, >= 1,000 race histories
checked for linearizability, fault trials; writes ``RESULTS.md``) and ``make fuzz`` (``python -m testbed.reliability.fuzz --seconds N``,
atheris). The tools they share live in ``testbed/reliability``.

=====================  =======================================================
promise                tests
=====================  =======================================================
1 never over-admit     ``test_never_over_admit`` (``scheduler``, ``submitters``,
                       ``observer``, ``oracle``, ``gate_a``, ``audit``); the
                       judges' own tables: ``test_oracle``,
                       ``test_gate_a_judge``; what the audit log records:
                       ``test_audit_records``; which of the real clients'
                       wire habits change an outcome: ``test_wire_habits``
                       admission linearizable, checked by porcupine
                       (``lincheck/``) on recorded race histories:
                       ``test_linearizable`` (``races``, ``histories``)
2 fail closed          ``test_fail_closed`` (``faults``)
3 bad input            ``test_bad_input`` (``review_strategies``), ``fuzz``
4 identity and TLS     ``test_identity_and_tls``
5 restarts, rotation   ``test_restarts_and_rotation`` (``steady_stream``)
=====================  =======================================================

Every test records its counts in ``testbed.reliability.ledger.LEDGER``;
``conftest.py`` prints the table at the end of the session.
"""

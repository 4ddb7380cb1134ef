"""Reliability and security suite: elb-gate's promises, proved with numbers.

Bounded parts run under ``make test`` (``tests/reliability/test_*.py``, ~3-4 min on
2 cores); the long runs are ``make soak`` (``python -m tests.reliability.soak``,
>= 1,000 schedules plus fault trials, writes ``RESULTS.md``) and ``make fuzz``
(``python -m tests.reliability.fuzz --seconds N``, atheris).

=====================  =======================================================
promise                tests
=====================  =======================================================
1 never over-admit     ``test_never_over_admit`` (``scheduler``, ``submitters``,
                       ``observer``, ``job_completion``, ``cluster``)
2 fail closed          ``test_fail_closed`` (``fault_trials``)
3 bad input            ``test_bad_input`` (``review_strategies``,
                       ``inprocess_webhook``), ``fuzz``
4 identity and TLS     ``test_identity_and_tls``
5 restarts, rotation   ``test_restarts_and_rotation`` (``steady_stream``)
=====================  =======================================================

Every test records its counts in ``ledger.LEDGER``; ``conftest.py`` prints the
table at the end of the session.
"""

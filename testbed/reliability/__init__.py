"""The reliability suite's tools: elb-gate's promises, proved with numbers on the real
control plane. The bounded runs are ``tests/reliability`` (in ``make test``); the long
ones are ``make soak`` (``python -m testbed.reliability.soak``) and ``make fuzz``.

The judges (:mod:`~testbed.reliability.oracle`, :mod:`~testbed.reliability.gate_a`)
import nothing from the code they judge.
"""

"""Every exit code of ``elb-gate``, in one place (``--help`` and docs/cli.md list them).

``elb-gate submit`` exits with COMMAND's own code when COMMAND ran. The codes
below were chosen from sysexits(3) and timeout(1) so a caller can tell the
outcomes apart; a COMMAND that itself exits with one of them is
indistinguishable by code alone (the last stderr line says which it was).
"""

from __future__ import annotations

import signal

OK = 0
REFUSED = 1
"""``lease release --force`` refused: the Lease is live."""
USAGE = 2
"""Bad command line (argparse's own code)."""
NO_SUCH_NAMESPACE = 66
"""EX_NOINPUT: ``census``/``lease`` named a namespace that does not exist."""
COORDINATION_ERROR = 69
"""EX_UNAVAILABLE: the Kubernetes API failed, did not answer, or refused (RBAC)."""
SUBMIT_SLOT_TIMEOUT = 75
"""EX_TEMPFAIL: the submit Lease stayed busy past BLAST_SUBMIT_SLOT_WAIT_MAX_SECONDS."""
CAPACITY_TIMEOUT = 76
"""The namespace stayed at BLAST_MAX_RUN_CONCURRENCY past BLAST_CAPACITY_WAIT_MAX_SECONDS."""
CONFIG_ERROR = 78
"""EX_CONFIG: incoherent BLAST_*/ELB_GATE_* settings, or no usable kubeconfig."""
EXEC_TIMEOUT = 124
"""As timeout(1): COMMAND ran past the exec timeout and was terminated."""
CANNOT_EXECUTE = 126
"""As the shell: COMMAND exists but cannot be executed."""
COMMAND_NOT_FOUND = 127
"""As the shell: COMMAND was not found."""
SIGNAL_BASE = 128
"""128 + N: stopped by signal N (130 for SIGINT, 143 for SIGTERM) after releasing."""

SUBMIT = "submit"
CENSUS = "census"
LEASE_STATUS = "lease status"
LEASE_RELEASE = "lease release"
_EVERY = frozenset({SUBMIT, CENSUS, LEASE_STATUS, LEASE_RELEASE})
_READERS = frozenset({CENSUS, LEASE_STATUS, LEASE_RELEASE})

TABLE: tuple[tuple[str, str, frozenset[str]], ...] = (
    (
        "COMMAND's code",
        "submit: COMMAND ran; its own exit status (success or failure)",
        frozenset({SUBMIT}),
    ),
    (str(NO_SUCH_NAMESPACE), "census/lease: the namespace does not exist", _READERS),
    (
        str(COORDINATION_ERROR),
        "Kubernetes API error, no answer, or RBAC denial (fail closed)",
        _EVERY,
    ),
    (
        str(SUBMIT_SLOT_TIMEOUT),
        "submit-slot timeout: Lease busy past the wait limit",
        frozenset({SUBMIT}),
    ),
    (
        str(CAPACITY_TIMEOUT),
        "capacity timeout: namespace at its ceiling past the wait limit",
        frozenset({SUBMIT}),
    ),
    (str(CONFIG_ERROR), "bad settings (env) or no usable kubeconfig", _EVERY),
    (
        str(EXEC_TIMEOUT),
        "exec timeout: COMMAND terminated after the exec timeout",
        frozenset({SUBMIT}),
    ),
    (str(CANNOT_EXECUTE), "COMMAND is not executable", frozenset({SUBMIT})),
    (str(COMMAND_NOT_FOUND), "COMMAND not found", frozenset({SUBMIT})),
    (
        f"{SIGNAL_BASE + signal.SIGINT}/{SIGNAL_BASE + signal.SIGTERM}",
        "interrupted by SIGINT/SIGTERM (COMMAND terminated, Lease released)",
        frozenset({SUBMIT}),
    ),
    (
        str(REFUSED),
        "lease release --force: refused, the Lease is live",
        frozenset({LEASE_RELEASE}),
    ),
    (str(USAGE), "bad command line", _EVERY),
)
"""Each code, what it means, and the commands that can end with it."""


def help_text(*commands: str) -> str:
    """The exit-code table as shown in ``--help``: the rows of ``commands`` (a
    command's own help), or every row (the top level)."""
    wanted = set(commands)
    rows = [(code, meaning) for code, meaning, used in TABLE if not wanted or used & wanted]
    width = max(len(code) for code, _ in rows)
    lines = ["exit codes:"]
    lines += [f"  {code.ljust(width)}  {meaning}" for code, meaning in rows]
    return "\n".join(lines)


def for_signal(signum: int) -> int:
    """The shell's convention for "stopped by signal N"."""
    return SIGNAL_BASE + signum

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

TABLE: tuple[tuple[str, str], ...] = (
    ("COMMAND's code", "submit: COMMAND ran; its own exit status (success or failure)"),
    (str(NO_SUCH_NAMESPACE), "census/lease: the namespace does not exist"),
    (str(COORDINATION_ERROR), "Kubernetes API error, no answer, or RBAC denial (fail closed)"),
    (str(SUBMIT_SLOT_TIMEOUT), "submit-slot timeout: Lease busy past the wait limit"),
    (str(CAPACITY_TIMEOUT), "capacity timeout: namespace at its ceiling past the wait limit"),
    (str(CONFIG_ERROR), "bad settings (env) or no usable kubeconfig"),
    (str(EXEC_TIMEOUT), "exec timeout: COMMAND terminated after the exec timeout"),
    (str(CANNOT_EXECUTE), "COMMAND is not executable"),
    (str(COMMAND_NOT_FOUND), "COMMAND not found"),
    (
        f"{SIGNAL_BASE + signal.SIGINT}/{SIGNAL_BASE + signal.SIGTERM}",
        "interrupted by SIGINT/SIGTERM (COMMAND terminated, Lease released)",
    ),
    (str(REFUSED), "lease release --force: refused, the Lease is live"),
    (str(USAGE), "bad command line"),
)


def help_text() -> str:
    """The exit-code table as shown in ``--help``."""
    width = max(len(code) for code, _ in TABLE)
    lines = ["exit codes:"]
    lines += [f"  {code.ljust(width)}  {meaning}" for code, meaning in TABLE]
    return "\n".join(lines)


def for_signal(signum: int) -> int:
    """The shell's convention for "stopped by signal N"."""
    return SIGNAL_BASE + signum

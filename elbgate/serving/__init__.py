"""What the two servers (``python -m webhook``, ``python -m controller``) share to set
up their process, and nothing the protocol needs: the ``--help`` of their settings,
log formatting, the garbage collector's tuning, and the build-info and credential
metrics. The client and the rest of :mod:`elbgate` never import it (an import-linter
contract)."""

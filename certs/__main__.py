"""``python -m certs`` (``make certs``): see :mod:`certs.cli`."""

import sys

from certs.cli import main

sys.exit(main(sys.argv[1:]))

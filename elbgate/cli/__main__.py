"""``python -m elbgate.cli``: the same as the ``elb-gate`` console script."""

import sys

from elbgate.cli import main

sys.exit(main())

"""``python -m client``: the same as the ``elb-gate`` console script."""

import sys

from client.cli import main

sys.exit(main())

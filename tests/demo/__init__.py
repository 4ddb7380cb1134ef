"""``make run`` (``python -m testbed.demo``), run as a newcomer runs it and judged by its summary."""

"""``make run`` (``python -m testbed.demo``): elb-gate end to end on the real control plane."""

"""elb-gate's shared protocol library.

Used by the webhook, the controller and the submit paths (``elb-gate`` CLI), so
all of them agree on names, Lease rules and the census of active searches.
"""

__version__ = "0.1.0"

"""elb-gate's admission webhook (``python -m webhook``).

Three webhooks on one HTTPS server: search admission (Gate A + Gate B on
search Jobs), the Lease stamp (mutating) and the Lease guard (validating).
Policies are pure (``search_admission``, ``lease_stamp``, ``lease_guard``);
``admission`` reads what they need, ``endpoint`` is the HTTP layer, ``http``
holds the two aiohttp applications and ``server`` wires and runs them.
"""

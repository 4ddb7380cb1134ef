"""A small, faithful Kubernetes API emulator for elb-gate's tests (never imported by product code).

    emu = Emulator(users=[User.plain("alice")]).start()
    subprocess.run(["kubectl", "--kubeconfig", emu.kubeconfig("alice"), "get", "leases"])
"""

from .emulator import Emulator
from .errors import ApiError
from .faults import Fault
from .users import User

__all__ = ["ApiError", "Emulator", "Fault", "User"]

"""The test bed's names for the kubelet stand-in's annotations are the ones
``localkube/kubelet.go`` reads: a key renamed on one side only would make every pod
run until deleted, silently."""

from __future__ import annotations

import re

from testbed import kubelet_stand_in as stand_in
from testbed.controlplane import REPO


def test_every_name_is_a_key_the_kubelet_stand_in_reads() -> None:
    source = (REPO / "localkube" / "kubelet.go").read_text()
    (prefix,) = re.findall(r'annotationPrefix\s*=\s*"([^"]+)"', source)
    assert prefix == stand_in.PREFIX
    keys = {prefix + k for k in re.findall(r'annotationPrefix \+ "([^"]+)"', source)}
    keys |= set(re.findall(r'"(' + re.escape(prefix) + r'[a-z-]+)"', source))
    names = {
        value
        for name, value in vars(stand_in).items()
        if name.isupper() and name != "PREFIX" and isinstance(value, str)
    }
    assert len(names) == 9
    assert names <= keys, sorted(names - keys)
    assert keys <= names, sorted(keys - names)  # and the test bed can name each

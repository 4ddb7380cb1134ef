"""Reading the image's recipes and contents: the Dockerfile's final stage, the lock
files, and the OCI archive `make image` writes (its config and its layers' files)."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PYTHON_OF_DEBIAN = {"bookworm": "3.11"}
"""The python3 each Debian release ships (the Dockerfile's and make image's interpreter)."""


@dataclass
class FinalStage:
    text: str
    user: str = ""
    cmd: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    apt_packages: list[str] = field(default_factory=list)
    ids: tuple[int, int] = (-1, -1)


def dockerfile_final(dockerfile: str) -> FinalStage:
    """What the Dockerfile's last stage sets, read from its instructions."""
    text = re.split(r"^FROM ", dockerfile, flags=re.MULTILINE)[-1]
    joined = re.sub(r"\\\n\s*", " ", text)
    stage = FinalStage(text=text)
    for line in joined.splitlines():
        word, _, rest = line.partition(" ")
        if word == "USER":
            stage.user = rest.strip()
        elif word == "CMD":
            stage.cmd = json.loads(rest)
        elif word == "EXPOSE":
            stage.ports = sorted(f"{p}/tcp" if "/" not in p else p for p in rest.split())
        elif word == "ENV":
            stage.env.update(dict(re.findall(r"(\w+)=(\S+)", rest)))
        elif word == "RUN" and "apt-get install" in rest:
            words = rest.split("apt-get install", 1)[1].split("&&")[0].split()
            stage.apt_packages = sorted(w for w in words if not w.startswith("-"))
        elif word == "RUN" and "useradd" in rest:
            uid = re.search(r"useradd .*--uid (\d+) --gid (\d+)", rest)
            gid = re.search(r"groupadd .*--gid (\d+)", rest)
            assert uid and gid, line
            assert uid.group(2) == gid.group(1), "the user's group is the group made"
            stage.ids = (int(uid.group(1)), int(gid.group(1)))
    return stage


def lock_pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``name -> (version, [sha256, ...])`` of a requirements lock with hashes."""
    pins: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", path.read_text()):
        pin = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        if pin:
            name = re.sub(r"[-_.]+", "-", pin.group(1)).lower()
            pins[name] = (pin.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return pins


@dataclass
class Image:
    """An OCI archive opened: its index, manifest, config and the union of its layers."""

    index: dict[str, Any]
    manifest: dict[str, Any]
    config: dict[str, Any]
    files: dict[str, tarfile.TarInfo]
    contents: dict[str, bytes]

    def read(self, path: str) -> bytes:
        return self.contents[path]


_WANTED = re.compile(
    r"^(etc/(passwd|group)|opt/elb-gate/pyvenv\.cfg|.*\.dist-info/(METADATA|RECORD)"
    r"|var/lib/dpkg/status\.d/.*)$"
)


def open_archive(archive: Path) -> Image:
    """The archive's index, manifest, config and every layer's members (later layers win)."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
            assert member is not None
            return member.read()

        index_member = tar.extractfile("index.json")
        assert index_member is not None
        index = json.load(index_member)
        (entry,) = index["manifests"]
        manifest = json.loads(blob(entry["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        files: dict[str, tarfile.TarInfo] = {}
        contents: dict[str, bytes] = {}
        for layer in manifest["layers"]:
            assert layer["mediaType"].endswith("tar+gzip"), layer["mediaType"]
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layer["digest"])))) as lt:
                for member in lt:
                    name = member.name.removeprefix("./").rstrip("/")
                    files[name] = member
                    if member.isfile() and _WANTED.match(name):
                        data = lt.extractfile(member)
                        assert data is not None
                        contents[name] = data.read()
    return Image(index, manifest, config, files, contents)

"""The Dockerfile: one slim, multi-stage, non-root image for both components,
with no build tools and no generated keys inside."""

from __future__ import annotations

import re

from tests.install.rendering import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
IGNORE = (REPO / ".dockerignore").read_text().split("\n")


def _stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.MULTILINE)[1:]


def test_the_image_is_built_in_two_stages_from_a_slim_python() -> None:
    stages = _stages()
    assert len(stages) == 2
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.\d+-slim", DOCKERFILE, flags=re.MULTILINE)
    assert all(s.startswith("${PYTHON_IMAGE}") for s in stages)


def test_the_final_stage_runs_as_the_deployments_non_root_user_without_build_tools() -> None:
    final = _stages()[-1]
    assert "USER 10001:10001" in final
    assert "COPY --from=build /opt/elb-gate /opt/elb-gate" in final
    assert not re.search(r"apt-get|gcc|build-essential|pip install", final)
    assert 'CMD ["python", "-m", "webhook"]' in final


def test_keys_and_local_state_never_enter_the_build_context() -> None:
    assert IGNORE[IGNORE.index("*") + 1 :]  # everything is excluded, then re-included
    allowed = {line[1:].rstrip("/") for line in IGNORE if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "elbgate", "webhook", "controller", "certs"}
    assert "certs/out/" in IGNORE

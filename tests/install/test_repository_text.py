"""The repository speaks to users and maintainers of elb-gate: no file names a
path outside it (a clone has none of them), and the docs point at the design
that ships with it."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.install.rendering import REPO

FORBIDDEN = {
    "a machine path": re.compile(r"/work/|/home/\w+/|/root/"),
    "a file next to the repository": re.compile(r"\.\./shared|shared/DESIGN\.md"),
    "the retired internal contract": re.compile(r"CONTRACT-INTERNAL"),
    "a design file the repository does not have (it has docs/design.md)": re.compile(
        r"\bDESIGN\.md"
    ),
    "the machine it was built on": re.compile(
        r"this shared (\d-core )?machine|shared 2-core", re.I
    ),
}
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".yaml",
    ".yml",
    ".json",
    ".toml",
    ".tpl",
    ".txt",
    ".env",
    ".cfg",
    "",
}


def tracked_text_files() -> list[str]:
    """Every file git tracks (and every new one not ignored) that is text we write."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f for f in out if (REPO / f).is_file() and (REPO / f).suffix in TEXT_SUFFIXES]


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_no_file_names_what_a_clone_does_not_have(what: str) -> None:
    pattern = FORBIDDEN[what]
    hits = []
    for name in tracked_text_files():
        if name == "tests/install/test_repository_text.py":
            continue
        text = (REPO / name).read_text(errors="replace")
        hits += [
            f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)
        ]
    assert hits == [], f"{what}: {hits}"


def test_every_page_of_docs_a_file_names_is_in_the_repository() -> None:
    missing = []
    for name in tracked_text_files():
        text = (REPO / name).read_text(errors="replace")
        named = set(re.findall(r"\bdocs/([A-Za-z0-9_-]+\.md)", text))
        if name.startswith("docs/"):
            named |= set(re.findall(r"\]\(([A-Za-z0-9_-]+\.md)", text))
        missing += [
            f"{name}: docs/{page}" for page in sorted(named) if not (REPO / "docs" / page).is_file()
        ]
    assert missing == []


def test_the_design_ships_with_the_repository_and_the_docs_point_at_it() -> None:
    design = REPO / "docs" / "design.md"
    assert design.is_file()
    assert "docs/design.md" in (REPO / "README.md").read_text()
    for doc in ("interfaces.md", "install.md"):
        assert "design.md" in (REPO / "docs" / doc).read_text(), doc


def test_every_section_of_the_design_a_file_cites_is_in_the_design() -> None:
    headings = {
        line.lstrip("#").strip()
        for line in (REPO / "docs" / "design.md").read_text().splitlines()
        if line.startswith("#")
    }
    cited = 0
    missing = []
    for name in tracked_text_files():
        text = " ".join((REPO / name).read_text(errors="replace").split())
        for section in re.findall(r'docs/design\.md, "([^"]+)"', text):
            cited += 1
            if not any(h.startswith(section) for h in headings):  # "Gate A" names "Gate A — …"
                missing.append(f"{name}: {section!r}")
    assert cited > 0
    assert missing == [], f"no such heading in docs/design.md: {missing}"


@pytest.mark.parametrize(
    "message",
    [
        "x509: certificate signed by unknown authority",
        'no endpoints available for service "elb-gate-webhook"',
        "context deadline exceeded",
        "ImagePullBackOff",
        'service "elb-gate-webhook" not found',
        "admissions.enforcer/disabled",
        "insufficient quota to match these scopes",
    ],
)
def test_the_troubleshooting_page_quotes_what_installers_see(message: str) -> None:
    assert message in (REPO / "docs" / "troubleshooting.md").read_text()

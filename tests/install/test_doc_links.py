"""The link checker `make lint` runs (tests/doc_links.py): GitHub's anchor rules,
broken files and anchors found, and none left in README.md and docs/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import doc_links


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Capacity — 429: what the nodes hold", "capacity--429-what-the-nodes-hold"),
        ("Staged rollout: warn → deny", "staged-rollout-warn--deny"),
        ("1. Build and publish the image", "1-build-and-publish-the-image"),
        (
            "Telling the API server from other callers (`webhook.clientAuth`)",
            "telling-the-api-server-from-other-callers-webhookclientauth",
        ),
        ("Gating another namespace (kustomize)", "gating-another-namespace-kustomize"),
        ("See [the design](design.md) *now*", "see-the-design-now"),
        ("snake_case stays", "snake_case-stays"),
    ],
)
def test_anchors_follow_githubs_rules(heading: str, anchor: str) -> None:
    assert doc_links.slug(heading) == anchor


def test_a_repeated_heading_gets_a_number_and_code_blocks_are_not_headings() -> None:
    text = '# Notes\n## Notes\n```sh\n# Notes\n```\n<a id="here"></a>\n'
    assert doc_links.anchors(text) == {"notes", "notes-1", "here"}


def test_a_missing_file_and_a_missing_anchor_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "docs" / "guide" / "a.md").write_text("# A\n## Present\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/guide/a.md#present) [self](#top) [gone](docs/guide/b.md)"
        " [typo](docs/guide/a.md#absent)\n"
        "`[code](nowhere.md)` [web](https://example.invalid/x#y)\n# Top\n"
    )
    broken = doc_links.check(tmp_path / "README.md", tmp_path)
    assert [(b.target, b.why) for b in broken] == [
        ("docs/guide/b.md", "no such file"),
        ("docs/guide/a.md#absent", "no heading makes #absent"),
    ]
    assert doc_links.main([str(tmp_path)]) == 1


def test_readme_and_docs_have_no_broken_link() -> None:
    broken = [str(b) for page in doc_links.pages() for b in doc_links.check(page)]
    assert broken == []

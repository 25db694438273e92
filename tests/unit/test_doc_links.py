"""Every relative link in README.md and docs/*.md resolves to a file in the repository, and none
leaves it (a reader of a checkout, a wheel's page or the repository's web view has nothing else)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.markdown_docs import links

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: a link with a scheme (https:, mailto:) names no file of the repository
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def link_problems(document: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``document`` that leaves ``root`` or names no file or directory there,
    and each code span naming a path that climbs out of ``root`` (``../shared/DESIGN.md``)."""
    text = document.read_text()
    problems = []
    for target in links(text):
        if _SCHEME.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (root / path.lstrip("/")) if path.startswith("/") else (document.parent / path)
        resolved = resolved.resolve()
        if not resolved.is_relative_to(root):
            problems.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
    for span in re.findall(r"`(\.\./[^`\s]*)`", text):
        if not (document.parent / span).resolve().is_relative_to(root):
            problems.append(f"`{span}`: names a file outside the repository")
    return problems


@pytest.mark.parametrize("document", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves_inside_the_repository(document: Path) -> None:
    assert link_problems(document) == []


def test_the_readme_links_its_references() -> None:
    """Not vacuous: the README's links are found (it links every reference page in docs/)."""
    found = {t.split("#")[0] for t in links((ROOT / "README.md").read_text())}
    assert {"docs/DESIGN.md", "docs/settings.md", "docs/deploy.md"} <= found


def test_dead_and_outside_links_are_found(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "lake.md").write_text("# lake\n")
    document = root / "README.md"
    document.write_text(
        "[lake](docs/lake.md#query) [web](https://example.org/x) [top](#install) [dir](docs/)\n"
        "[gone](docs/gone.md) [design](../shared/DESIGN.md) [abs](/docs/lake.md)\n"
        "[ref]: docs/missing.md\n<img src=\"docs/scale.png\">\n"
        "The design is `../shared/DESIGN.md`; `bucket[16](customer_id)` is code, not a link.\n"
        "```sh\nls [x](not-a-link.md)\n```\n"
    )
    assert link_problems(document, root) == [
        "docs/gone.md: no such file", "../shared/DESIGN.md: leaves the repository", "docs/missing.md: no such file",
        "docs/scale.png: no such file", "`../shared/DESIGN.md`: names a file outside the repository",
    ]

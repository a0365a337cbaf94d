"""The README fits a screen or two, shows the two commands before the picture of the report,
links every topic doc, and every picture and link in it and in docs/ exists (issues 29, 46)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")


def _local_links(path: Path) -> list[Path]:
    text = path.read_text(encoding="utf-8")
    return [
        (path.parent / target).resolve()
        for target in LINK.findall(text)
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def test_the_readme_fits_a_screen_or_two_and_shows_the_report():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert pictures, "the README shows a picture of the report"
    for picture in pictures:
        assert (ROOT / picture).is_file(), picture
        assert (ROOT / picture).stat().st_size > 10_000, f"{picture} looks empty"


def test_every_local_link_of_the_readme_and_the_docs_exists():
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        missing = [str(p) for p in _local_links(doc) if not p.exists()]
        assert not missing, f"{doc.name}: {missing}"


def test_the_quickstart_comes_before_the_picture_and_every_topic_doc_is_linked():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    picture = text.index("![")
    quickstart = text.index("## Quickstart")
    assert quickstart < picture
    for command in ("nox -s bench-cpu", "nox -s tests"):
        assert quickstart < text.index(command) < picture, command
    assert len(text[:picture].splitlines()) <= 40, "the Quickstart fits the first screen"
    linked = {p.name for p in _local_links(ROOT / "README.md")}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in linked]
    assert not unlinked, f"README.md links no row to {unlinked}"

"""The README fits a screen or two and every picture and link in it (and in the guide it
points to) exists in the repository (issue 29)."""

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


def test_every_local_link_of_the_readme_and_the_guide_exists():
    for doc in (ROOT / "README.md", ROOT / "docs" / "guide.md"):
        missing = [str(p) for p in _local_links(doc) if not p.exists()]
        assert not missing, f"{doc.name}: {missing}"

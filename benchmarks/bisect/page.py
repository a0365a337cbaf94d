"""`index.html` of a bisection: the picture, then `summary.md` rendered as HTML.

The summary is Markdown of a small, known shape (headings, paragraphs, fenced blocks, pipe
tables, bullets, inline code), written by `output.summary`; `markdown_html` renders exactly that
shape, escaped, so the page and the PR comment never say different things. No script and no
network: the page opens from `file://`.
"""

from __future__ import annotations

import html
import re

_CODE = re.compile(r"`([^`]+)`")
_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:64em;margin:2em auto;line-height:1.4}"
    "pre{white-space:pre-wrap;background:#f6f8fa;padding:.8em}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .5em}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}code{background:#f3f3f3}"
)


def _inline(text: str) -> str:
    return _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", html.escape(text, quote=False))


def _table(rows: list[str]) -> str:
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    head, body = cells[0], cells[2:]
    numeric = ["---:" in c for c in rows[1].strip().strip("|").split("|")]
    out = ["<table><thead><tr>", *(f"<th>{_inline(c)}</th>" for c in head), "</tr></thead><tbody>"]
    for row in body:
        out.append("<tr>")
        out += [
            f"<td{' class=num' if i < len(numeric) and numeric[i] else ''}>{_inline(c)}</td>"
            for i, c in enumerate(row)
        ]
        out.append("</tr>")
    return "".join([*out, "</tbody></table>"])


def markdown_html(text: str) -> str:
    """The summary's Markdown (module docstring) as HTML."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            stop = len(lines) if end is None else end
            out.append(f"<pre>{html.escape(chr(10).join(lines[i + 1 : stop]))}</pre>")
            i = stop + 1
        elif line.startswith("|"):
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), None)
            stop = len(lines) if end is None else end
            out.append(_table(lines[i:stop]))
            i = stop
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append(f"<ul>{''.join(items)}</ul>")
        else:
            level = len(line) - len(line.lstrip("#"))
            if 0 < level <= 6 and line[level : level + 1] == " ":
                out.append(f"<h{level}>{_inline(line[level + 1 :])}</h{level}>")
            elif line.strip():
                out.append(f"<p>{_inline(line)}</p>")
            i += 1
    return "\n".join(out)


def page(title: str, picture_svg: str, markdown: str) -> str:
    """The whole page: the summary with the picture after its opening paragraphs."""
    body = markdown_html(markdown)
    figure = (
        f"<figure>{picture_svg}<figcaption>Each commit the search measured, at its level "
        "against the good one (the paired ratios chained along the search, 2-SE bars); "
        "culprits in red.</figcaption></figure>"
        if picture_svg
        else ""
    )
    head, sep, rest = body.partition("<h3>")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"{head}{figure}{sep}{rest}</body></html>"
    )

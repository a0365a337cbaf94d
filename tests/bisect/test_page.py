"""The bisection's page (`benchmarks.bisect.page`): the summary's Markdown as escaped HTML."""

from __future__ import annotations

from benchmarks.bisect.page import markdown_html, page

SUMMARY = """## phasebench bisect: CULPRIT

1 commit(s) verified, <explaining> 97%.

### Culprit `abc`: x1.9

```
subject <b>
```

| op | parent µs |
| --- | ---: |
| `aten::mm` | 67.6 |

- skipped `def`: broken
"""


def test_the_summary_shapes_render_and_escape():
    out = markdown_html(SUMMARY)
    assert "<h2>phasebench bisect: CULPRIT</h2>" in out
    assert "<p>1 commit(s) verified, &lt;explaining&gt; 97%.</p>" in out
    assert "<h3>Culprit <code>abc</code>: x1.9</h3>" in out
    assert "<pre>subject &lt;b&gt;</pre>" in out
    assert "<td><code>aten::mm</code></td><td class=num>67.6</td>" in out
    assert "<ul><li>skipped <code>def</code>: broken</li></ul>" in out


def test_the_picture_comes_before_the_first_culprit():
    text = page("t", "<svg></svg>", SUMMARY)
    assert text.index("<svg>") < text.index("<h3>")
    assert "<svg>" not in page("t", "", SUMMARY)

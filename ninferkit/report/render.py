"""Renderers, registered by name: each turns a Document into one file in the report folder.

`markdown` writes <stem>.md (index, or the appendix; figures linked from figures/); `html` one self-contained
index.html: inline CSS, figures as data: URIs, and a Content-Security-Policy that forbids the page
from loading anything, so it opens offline and never calls out. Both open with the same table of
contents, linking each section by the anchor GitHub gives its heading (`anchor`), which the HTML
headings carry as their ids. On a narrow screen (a phone) a table wider than the page scrolls sideways inside
its own box, so the page keeps the screen's width and its text stays readable; printed, the HTML wraps wide
tables on the page instead of cutting them off.

Text in a write-up comes from profiles, servers and logs, so both renderers escape it: the only
markup a block's text carries is `code` spans; everything else is shown as written, never read as
HTML, a link, an image, a heading or a list (a newline inside a paragraph or a cell is a space).
Both write atomically through ninferkit.rundir.runs, scrubbed of the run's API key.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from ninferkit.errors import NinferkitError
from ninferkit.redaction import remember_env
from ninferkit.registry import Registry
from ninferkit.report.document import Block, Bullets, Code, Document, Figure, Paragraph, Table
from ninferkit.rundir.runs import RunDir, write_text_atomic

Renderer = Callable[[Document, Path], Path]
_RENDERERS: Registry[Renderer] = Registry("report.formats names renderer", NinferkitError)
renderers = _RENDERERS.names
get_renderer = _RENDERERS.get


def register_renderer(name: str) -> Callable[[Renderer], Renderer]:
    """Decorator: write-ups can be rendered as `name` (report.formats)."""
    def add(renderer: Renderer) -> Renderer:
        return _RENDERERS.add(name, renderer)
    return add


# --- Markdown ---------------------------------------------------------------------------------------

def anchors(document: Document) -> list[str]:
    """Each section's anchor as GitHub makes it from the heading: lower case, only letters, digits, spaces,
    hyphens and underscores kept, spaces made hyphens, a repeated one numbered (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = []
    for section in document.sections:
        slug = re.sub(r"[^\w\- ]", "", section.title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.append(f"{slug}-{count}" if count else slug)
    return out


@register_renderer("markdown")
def render_markdown(document: Document, folder: Path) -> Path:
    contents = " · ".join(f"[{_md_cell(section.title)}](#{anchor})"
                          for section, anchor in zip(document.sections, anchors(document), strict=True))
    lines = [f"# {_md_inline(document.title)}", "", _md_inline(document.generated), "", f"Contents: {contents}", ""]
    lines += [f"[{_md_cell(title)}]({stem}.md)" for title, stem in document.companions]
    lines += [""] if document.companions else []
    for section in document.sections:
        lines += [f"## {_md_inline(section.title)}", ""]
        for block in section.blocks:
            lines += _markdown_block(block) + [""]
    return _write(folder / f"{document.stem}.md", "\n".join(lines).rstrip("\n") + "\n")


def markdown_fragment(blocks: Sequence[Block]) -> str:
    """Blocks as Markdown with no page around them: a notebook cell's text (ninferkit.report.notebook_view)."""
    return "\n\n".join("\n".join(_markdown_block(block)) for block in blocks)


def _markdown_block(block: Block) -> list[str]:
    if isinstance(block, Paragraph):
        return [_md_inline(block.text)]
    if isinstance(block, Bullets):
        return [f"- {_md_inline(item)}" for item in block.items]
    if isinstance(block, Code):
        runs = [len(run) for run in re.findall(r"`+", block.text)]
        fence = "`" * max(3, max(runs, default=0) + 1)
        return [fence, block.text, fence]
    if isinstance(block, Figure):
        return [f"![{_md_inline(block.caption)}]({block.file})", "", f"*{_md_inline(block.caption)}*"]
    lines = [f"*{_md_inline(block.caption)}*", ""] if block.caption else []
    lines.append("| " + " | ".join(_md_cell(c) for c in block.columns) + " |")
    lines.append("|" + "|".join("---" for _ in block.columns) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
    return lines


_CODE_SPAN = re.compile(r"(`[^`]+`)")
_MD_PUNCTUATION = re.compile(r"([\\`*<]|\](?=[(\[]))")
"""What opens HTML or an autolink (<), a code span, emphasis, an escape, or a link or image (a ] followed by
( or [); a bracket alone, as in an interval [2,046, 2,050], is text."""
_MD_LINE_START = re.compile(r"^(\s*)([#>+=_\[-])|^(\s*\d+)([.)])(?=\s|$)")
"""A heading, quote, list, thematic break or link reference definition ([id]: url) at the start of a line."""


def _md_inline(text: str, starts_line: bool = True) -> str:
    """Markdown that shows `text` as written: `code` spans kept; outside them what would open HTML, a link,
    an image or emphasis escaped, newlines made spaces, and (for text that starts a line) a leading heading,
    quote or list marker escaped."""
    parts = _CODE_SPAN.split(" ".join(text.splitlines()))
    out = "".join(part if index % 2 else _MD_PUNCTUATION.sub(r"\\\1", part) for index, part in enumerate(parts))
    if not starts_line:
        return out
    return _MD_LINE_START.sub(lambda m: f"{m[1]}\\{m[2]}" if m[2] else f"{m[3]}\\{m[4]}", out, count=1)


def _md_cell(text: str) -> str:
    """A table cell: inline text only (a cell starts no block), its pipes escaped."""
    return _md_inline(text, starts_line=False).replace("|", "\\|")


def _write(path: Path, text: str) -> Path:
    """Write the file atomically, scrubbed of the API key the run's profile names (when it is set here)."""
    remember_env(_key_variable(RunDir(path.parent.parent).manifest))
    return write_text_atomic(path, text)


def _key_variable(manifest: Path) -> str | None:
    try:
        name = json.loads(manifest.read_text())["profile"]["serve"].get("api_key_env")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return name if isinstance(name, str) else None


# --- HTML -------------------------------------------------------------------------------------------

CSS = """
html { -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }
body { font-family: system-ui, sans-serif; font-size: 1rem; max-width: 72rem; margin: 2rem auto; padding: 0 1rem;
       color: #1d1d1f; line-height: 1.45; overflow-wrap: break-word; }
h1 { font-size: 1.7rem; line-height: 1.2; } h2 { font-size: 1.3rem; border-bottom: 1px solid #ccc; margin-top: 2.2rem; }
.table { margin: 0.8rem 0; }
.table > figcaption { margin-bottom: 0.3rem; }
.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border: 1px solid #d0d0d0; padding: 0.25rem 0.55rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
pre { background: #f6f6f6; padding: 0.7rem; overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere; }
code { font-family: ui-monospace, monospace; font-size: 0.88em; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; }
figcaption { font-style: italic; font-size: 0.9rem; }
.generated { color: #666; font-size: 0.85rem; }
nav { font-size: 0.95rem; }
nav ol { display: flex; flex-wrap: wrap; gap: 0 1.1rem; list-style: none; margin: 0.3rem 0 0; padding: 0; }
nav a { display: inline-block; padding: 0.3rem 0; }
@media (max-width: 40rem) {
  body { margin: 1rem auto; padding: 0 0.8rem; }
  h1 { font-size: 1.4rem; } h2 { font-size: 1.2rem; margin-top: 1.8rem; }
  th, td { padding: 0.2rem 0.4rem; }
}
@media print {
  body { max-width: none; margin: 0; padding: 0; font-size: 9pt; }
  .scroll { overflow: visible; }
  table { width: 100%; font-size: 7.5pt; }
  th, td { padding: 0.1rem 0.25rem; overflow-wrap: anywhere; }
  pre { overflow: visible; }
  h2 { break-after: avoid; } tr, figure:not(.table) { break-inside: avoid; }
}
@page { size: landscape; margin: 12mm; }
""".strip()

# Nothing may be fetched: images only from data: URIs, styles only inline, no scripts at all.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@register_renderer("html")
def render_html(document: Document, folder: Path) -> Path:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{html.escape(document.title)}</title>",
        f"<style>\n{CSS}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{html.escape(document.title)}</h1>",
        f'<p class="generated">{_inline(document.generated)}</p>',
    ]
    ids = anchors(document)
    parts.append('<nav aria-label="Contents">Contents:\n<ol>\n' + "\n".join(
        f'<li><a href="#{anchor}">{html.escape(section.title)}</a></li>'
        for section, anchor in zip(document.sections, ids, strict=True)) + "\n</ol>\n</nav>")
    parts += [f'<p><a href="{stem}.html">{html.escape(title)}</a></p>' for title, stem in document.companions]
    for section, anchor in zip(document.sections, ids, strict=True):
        parts.append(f'<h2 id="{anchor}">{html.escape(section.title)}</h2>')
        parts += [_html_block(block) for block in section.blocks]
    parts += ["</body>", "</html>"]
    return _write(folder / f"{document.stem}.html", "\n".join(parts) + "\n")


def html_fragment(blocks: Sequence[Block]) -> str:
    """Blocks as HTML with no page around them: a notebook cell's output, with the write-up's table style
    scoped to a `ninferkit-report` box (ninferkit.report.notebook_view)."""
    style = "\n".join(scoped(rule, FRAGMENT_SCOPE) for rule in _FRAGMENT_CSS)
    return (f'<div class="ninferkit-report">\n<style>\n{style}\n</style>\n'
            + "\n".join(_html_block(block) for block in blocks) + "\n</div>")


FRAGMENT_SCOPE = "div.ninferkit-report"
"""Every rule of a notebook's table style applies under this box alone."""


def scoped(rule: str, scope: str) -> str:
    """`rule` with each selector of its comma list under `scope`: `th, td {...}` scoped as `scope th, td` left
    `td` unscoped and weaker than JupyterLab's, so every notebook table's text was right-aligned (issue 44)."""
    selectors, body = rule.split("{", 1)
    return ", ".join(f"{scope} {selector.strip()}" for selector in selectors.split(",")) + " {" + body


_FRAGMENT_CSS = (
    ".scroll { max-width: 100%; overflow-x: auto; }",
    "table { border-collapse: collapse; font-size: 0.9rem; }",
    ".scroll th, .scroll td { border: 1px solid #d0d0d0; padding: 0.25rem 0.55rem; text-align: left; "
    "vertical-align: top; }",
    "th { background: #f3f3f3; }",
    "figcaption { font-style: italic; font-size: 0.9rem; margin-bottom: 0.3rem; }",
)
"""The write-up's table rules (CSS above), for a table inside a notebook's page. A cell's rule names the table's
scrolling box: `div.ninferkit-report .scroll td` (two classes, two elements) outweighs JupyterLab 4's
`:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td { text-align: right }` (two classes, one element), which
right-aligned every notebook table's text (issue 44; seen in a real browser, tests/live has no CSS engine)."""


def _inline(text: str) -> str:
    """Escaped text with `code` spans (the one inline markup the document uses), and a place a line may break
    after each / of a path and every 20 letters or digits of a longer word (a sha256): such a word would
    otherwise set its column's narrowest width, and a table with one would be wider than a phone's screen. A
    range's dash and a p50 / p90 / p99 slash stay on the line of the number before them, so a narrow cell
    never starts a line with one."""
    breakable = _LONG_WORD.sub(r"\1<wbr>", html.escape(text))
    breakable = re.sub(r" ([–/]) ", r"&nbsp;\1 ", breakable)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", breakable)


_LONG_WORD = re.compile(r"(\w{20}|/)(?=\w)")


def _html_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{_inline(block.text)}</p>"
    if isinstance(block, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{_inline(item)}</li>" for item in block.items) + "\n</ul>"
    if isinstance(block, Code):
        return f"<pre><code>{html.escape(block.text)}</code></pre>"
    if isinstance(block, Figure):
        data = base64.b64encode(block.path.read_bytes()).decode("ascii")
        alt = html.escape(block.caption, quote=True)
        return (f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_inline(block.caption)}</figcaption></figure>")
    return _html_table(block)


def _html_table(table: Table) -> str:
    """A table in a box of its own that scrolls sideways when the table is wider than the page (a phone), so
    the page itself never does; its caption outside that box, wrapped to the page's width."""
    caption = f"<figcaption>{_inline(table.caption)}</figcaption>\n" if table.caption else ""
    head = "".join(f"<th>{_inline(c)}</th>" for c in table.columns)
    body = "\n".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    return (f'<figure class="table">{caption}<div class="scroll">\n<table>\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n{body}\n</tbody>\n</table>\n</div></figure>")

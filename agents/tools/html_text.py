"""HTML to readable markdown-like text for a model: headings, lists, links, paragraphs.

Linear in the size of the page (one pass of the standard library's `HTMLParser`, no tree), so
a hostile page costs no more than its (capped) length. Scripts, styles and other non-content
elements are dropped; the `<title>` becomes the first line.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "nav",
        "aside",
        "table",
        "tr",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "blockquote",
        "figure",
        "figcaption",
        "form",
        "hr",
        "address",
        "details",
        "summary",
    }
)
_HEADINGS = {f"h{n}": "#" * n for n in range(1, 7)}
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANK_LINES = re.compile(r"\n{3,}")


class _TextBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.title: list[str] = []
        self.skip_depth = 0
        self.in_title = False
        self.in_pre = 0
        self.links: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in _SKIPPED:
            self.skip_depth += 1
        elif self.skip_depth:
            return
        elif tag in _HEADINGS:
            self.out.append(f"\n\n{_HEADINGS[tag]} ")
        elif tag == "li":
            self.out.append("\n- ")
        elif tag in ("br", "td", "th"):
            self.out.append("\n" if tag == "br" else " | ")
        elif tag == "pre":
            self.in_pre += 1
            self.out.append("\n\n```\n")
        elif tag == "a":
            href = dict(attrs).get("href") or ""
            self.links.append(href if href.startswith(("http://", "https://")) else None)
            if self.links[-1]:
                self.out.append("[")
        elif tag in _BLOCKS:
            self.out.append("\n\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and not self.skip_depth:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in _SKIPPED:
            self.skip_depth = max(0, self.skip_depth - 1)
        elif self.skip_depth:
            return
        elif tag == "pre" and self.in_pre:
            self.in_pre -= 1
            self.out.append("\n```\n\n")
        elif tag == "a" and self.links:
            href = self.links.pop()
            if href:
                self.out.append(f"]({href})")
        elif tag in _HEADINGS or tag in _BLOCKS:
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skip_depth:
            self.out.append(data if self.in_pre else _SPACES.sub(" ", data.replace("\n", " ")))


def html_to_text(html: str) -> str:
    """The readable text of an HTML page, as light markdown (title first, if there is one)."""
    builder = _TextBuilder()
    builder.feed(html)
    builder.close()
    title = " ".join("".join(builder.title).split())
    lines, fenced = [], False
    for line in "".join(builder.out).split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        lines.append(line.rstrip() if fenced else line.strip())  # keep a code block's indent
    body = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    return f"Title: {title}\n\n{body}" if title else body

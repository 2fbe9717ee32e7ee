"""MkDocs hook: drop HTML comments from each page's content.

The markdown source carries machine-readable comments (pytest-codeblocks markers,
``number-ok`` reasons) that readers should not find in the page source. Code blocks
are HTML-escaped (``&lt;!--``), so comments shown inside code survive.
"""
import re

_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def strip_html_comments(page_html: str) -> str:
    return _COMMENT.sub("", page_html)


def on_page_content(html_text, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    return strip_html_comments(html_text)

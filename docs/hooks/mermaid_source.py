"""MkDocs hook: HTML-escape each mermaid diagram's source.

mermaid2's ``fence_mermaid_custom`` writes the diagram source into
``<pre class="mermaid"><code>`` without escaping it. Material reads the source
back with ``textContent``, so markup in a label such as ``<br/>`` (or a bare
``<``) would be lost. Escaping here makes ``textContent`` return the source
exactly as written in the markdown.
"""
import html
import re

_MERMAID_BLOCK = re.compile(r'(<pre\b[^>]*\bclass="mermaid"[^>]*><code>)(.*?)(</code></pre>)', re.DOTALL)


def escape_mermaid_sources(page_html: str) -> str:
    return _MERMAID_BLOCK.sub(
        lambda m: m.group(1) + html.escape(html.unescape(m.group(2)), quote=False) + m.group(3), page_html
    )


def on_page_content(html_text, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    return escape_mermaid_sources(html_text)

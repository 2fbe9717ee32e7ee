"""MkDocs hook: every code block caption links to the complete, tested file.

* ``on_files`` adds each ``snippets/*.py`` of the repository to the site as a static
  file at ``snippets/<name>.py`` (``mkdocs serve`` serves it too). It runs before the
  other plugins' ``on_files`` so that htmlproofer knows the files when it checks links.
* ``on_page_content`` wraps the text of Material's caption,
  ``<span class="filename">snippets/x.py（用法）</span>``, in a relative link to that
  file. The visible text is unchanged; captions naming no served snippet stay as they are.
"""
import pathlib
import re

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

SNIPPETS = pathlib.Path(__file__).resolve().parents[2] / "snippets"
_CAPTION = re.compile(r'(<span class="filename">)((snippets/[\w.-]+\.py)[^<]*)(</span>)')


@event_priority(100)
def on_files(files, config):
    for path in sorted(SNIPPETS.glob("*.py")):
        uri = f"snippets/{path.name}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def link_captions(page_html: str, url_of) -> str:
    """Wrap each snippet caption in ``<a href=url_of(src_uri)>``; ``url_of`` returns None for unknown files."""
    def wrap(match):
        href = url_of(match.group(3))
        if href is None:
            return match.group(0)
        return f'{match.group(1)}<a href="{href}">{match.group(2)}</a>{match.group(4)}'

    return _CAPTION.sub(wrap, page_html)


def on_page_content(html_text, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    def url_of(src_uri):
        file = files.get_file_from_path(src_uri)
        return file.url_relative_to(page.file) if file is not None else None

    return link_captions(html_text, url_of)

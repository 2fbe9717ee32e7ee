"""What turns the measured data into pages: ``python -m bench.render`` (render.py) writes docs/generated/.

A report reads JSON and nothing else: every contender, role, tie rule and target it needs comes
from the record's ``config``, which the experiment wrote; it imports no experiment and no part of
bench/harness/. Two kinds of module here render files:

* a report per experiment, ``report/<name>.py`` with ``NAME`` (the data file stem) and
  ``render(data) -> {path under docs/generated/: text}``;
* a summary, ``report/summary_p<n>.py`` with ``render_summary(load) -> {path: text}``, for what
  reads several data files (``load(name) -> data`` raises :class:`render.MissingData` when one
  is not committed, and the summary is then skipped).

The rest is shared: names.py (the vocabulary), prose.py (sentences), tables.py (markdown,
formats, the 实验环境 box), plots.py (font, style, deterministic SVG) and ops.py (what the
op-level reports share: the copy ceiling, shape labels, the peer comparison, the bandwidth bars).
"""

"""``python -m bench.render [--check] [--gpu GPU]``: docs/data/<gpu>/*.json -> docs/generated/ (bench/report/render.py)."""
from bench.report.render import main

if __name__ == "__main__":
    raise SystemExit(main())

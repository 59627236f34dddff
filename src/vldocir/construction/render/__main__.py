"""``python -m vldocir.construction.render``: render HTML files from the command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from vldocir.construction.input_folder import unique_document_ids
from vldocir.construction.render.batch import render_batch
from vldocir.construction.render.config import RenderConfig
from vldocir.errors import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vldocir.construction.render OUT_DIR FILE.html ... [--source S]``: each document's id
    is its file's name without the suffix, or for a folder's ``index.html`` the folder's name
    (:func:`~vldocir.construction.input_folder.document_id`); two files that would share an id are
    refused in one line (status 2) before anything is rendered."""
    ap = argparse.ArgumentParser(prog="python -m vldocir.construction.render", description=main.__doc__)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("html", nargs="+", type=Path)
    ap.add_argument("--source", default="generic")
    ap.add_argument("--timeout-s", type=float, default=RenderConfig.timeout_s)
    ap.add_argument("--format", choices=("png", "jpeg"), default="png")
    ap.add_argument("--workers", type=int, default=None, help="documents at once (default: one per core)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        doc_ids = unique_document_ids(args.html)
    except ConfigError as error:
        print(f"render error: {error}", file=sys.stderr)
        return 2
    cfg = RenderConfig(timeout_s=args.timeout_s, image_format=args.format, workers=args.workers)
    report = render_batch(list(zip(doc_ids, [args.source] * len(doc_ids), args.html, strict=True)), args.out_dir, cfg)
    print(json.dumps({k: v for k, v in asdict(report).items() if k != "pages"}, indent=2))
    return 1 if report.failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""A render worker process of :func:`vldocir.construction.render.render_batch` (not a command
for people): ``python -m vldocir.construction.render._worker OUT_DIR``.

Reads from stdin one JSON line with the :class:`RenderConfig` (as ``to_dict``), then one line per
task, ``[doc_id, source, html_path]``, or ``null`` to finish; renders each task with one
:class:`Renderer` and answers on stdout with one JSON line per task: ``{"doc_id", "ok", "n_pages"}``
or ``{"doc_id", "ok": false, "error_type", "error", "elapsed_s"}``, each with ``launches`` (the
browser launches so far); a last line ``{"launches"}`` before it exits. Logging goes to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from vldocir.construction.render.config import RenderConfig
    from vldocir.construction.render.renderer import Renderer

    out_dir = Path((argv or sys.argv[1:])[0])
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s [render worker]: %(message)s"
    )
    answers = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write on the answer channel
    config = RenderConfig(**json.loads(sys.stdin.readline()))

    def answer(obj: dict) -> None:
        answers.write(json.dumps(obj) + "\n")
        answers.flush()

    renderer = Renderer(config)
    try:
        for line in sys.stdin:
            task = json.loads(line)
            if task is None:
                break
            doc_id, source, html_path = task
            started = time.monotonic()
            try:
                doc = renderer.render(doc_id, source, Path(html_path), out_dir)
            except Exception as exc:
                text = str(exc).strip()
                answer(
                    {
                        "doc_id": doc_id,
                        "ok": False,
                        "error_type": type(exc).__name__,
                        "error": text.splitlines()[0][:2000] if text else repr(exc),
                        "elapsed_s": time.monotonic() - started,
                        "launches": renderer.launches,
                    }
                )
            else:
                answer({"doc_id": doc_id, "ok": True, "n_pages": len(doc.pages), "launches": renderer.launches})
    finally:
        renderer.close()
    answer({"launches": renderer.launches})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A document as the build knows it before rendering: its ``documents`` row.

Every way in makes these (generated HTML in :mod:`.build_generated`, a document index in
:mod:`.ingest`, a folder in :mod:`.input_folder`), and the assembly of rendered pages into tables
reads them; so the record lives here, below all of them, rather than in one of its users.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DocumentRecord:
    """A document's row of the ``documents`` table, less its page count (known once rendered)."""

    doc_id: str
    source: str
    domain: str
    title: str
    url: str | None = None
    license: str | None = None

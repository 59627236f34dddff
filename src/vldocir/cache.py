"""Content-keyed artifact cache with a stated policy (DESIGN.md §1, STYLE.md #8).

An artifact (an index, a set of embedding shards, ...) lives in ``<root>/<kind>/<key>/``, where the
key hashes everything that determines it. A finished artifact holds ``artifact.json`` (what went
into the key); a directory without it is partial and never read as finished.

Policies:
- ``reuse``: use a finished artifact; rebuild a partial one from scratch.
- ``resume``: like ``reuse``, but a stage that builds in parts (encoding shards) keeps the parts
  already written and continues.
- ``overwrite``: rebuild everything this job touches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from vldocir.io import atomic_write_json

log = logging.getLogger(__name__)

POLICIES = ("reuse", "resume", "overwrite")
DONE_FILE = "artifact.json"


def content_key(parts: Any) -> str:
    """A stable 16-hex-digit hash of a JSON-serialisable description."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass
class ArtifactCache:
    root: Path
    policy: str = "resume"
    events: list[dict] = field(default_factory=list)
    """Every lookup this job made: kind, key, ``hit`` / ``miss`` / ``overwrite``; goes to the manifest."""

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"cache_policy must be one of {POLICIES}, got {self.policy!r}")
        self.root = Path(self.root)

    def key_for(self, kind: str, **parts: Any) -> str:
        return content_key({"kind": kind, **parts})

    def directory(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def record(self, kind: str, key: str, status: str) -> None:
        self.events.append({"kind": kind, "key": key, "status": status})

    def lookup(self, kind: str, key: str) -> Path | None:
        """The finished artifact's directory if the policy allows using it, else ``None``."""
        path = self.directory(kind, key)
        if (path / DONE_FILE).is_file() and self.policy != "overwrite":
            self.record(kind, key, "hit")
            log.info("cache hit: %s %s", kind, key)
            return path
        self.record(kind, key, "overwrite" if path.exists() else "miss")
        return None

    @contextmanager
    def build(self, kind: str, key: str, description: dict) -> Iterator[Path]:
        """Yield an empty staging directory; on success it becomes the finished artifact at once."""
        final = self.directory(kind, key)
        staging = final.with_name(f".{key}.staging-{time.time_ns()}")
        staging.mkdir(parents=True)
        try:
            yield staging
            atomic_write_json({"kind": kind, "key": key, "description": description}, staging / DONE_FILE)
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

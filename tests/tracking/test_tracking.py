"""Tracking: the W&B mirror of a run, failed jobs, and the redaction rule.

What the tracker hands W&B is checked through a stub of the run object ``wandb.init`` returns
(``WandbTracker(init=...)``), with the pipeline run in process (``helpers.evaluate``). One slow
smoke test runs `python run.py logger=wandb` with the real wandb, offline, and checks that the
offline run directory and its files are there (W&B's internal transaction log is not parsed).
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from helpers import evaluate, newest_entry, run_py
from vldocir import store
from vldocir.manifest import REDACTED, redact_overrides, redact_secrets
from vldocir.tracking.wandb import WandbTracker

CONFIG_SECRET = "cfg-secret-5f1e2d3c4b5a"


class StubConfig(dict):
    def update(self, values, allow_val_change=False):
        super().update(values)


class StubRun:
    """The part of the run ``wandb.init`` returns that :class:`WandbTracker` uses."""

    def __init__(self, **init):
        self.init, self.argv = init, list(sys.argv)  # wandb records the command line at init
        self.name, self.config = init["name"], StubConfig(init["config"])
        self.summary: dict = {}
        self.logged: list[dict] = []
        self.exit_codes: list[int] = []

    def log(self, data):
        self.logged.append(data)

    def finish(self, exit_code=None):
        self.exit_codes.append(exit_code)


@pytest.fixture
def stub_wandb(isolated_paths):
    """``(tracker, runs)``: a ``logger=wandb`` tracker whose ``wandb.init`` records into ``runs``."""
    runs: list[StubRun] = []

    def init(**kwargs):
        runs.append(StubRun(**kwargs))
        return runs[-1]

    return WandbTracker(project="vldocir-tests", mode="offline", dir=str(isolated_paths / "logs"), init=init), runs


def test_wandb_run_mirrors_the_store_entry(stub_wandb, small_bench_dir):
    tracker, runs = stub_wandb
    metrics, _, entry = evaluate(f"dataset.source={small_bench_dir}", "dataset.build=null", tracker=tracker)
    manifest = json.loads((entry / store.MANIFEST_FILE).read_text())
    (run,) = runs
    assert run.exit_codes == [0]
    assert run.init["project"] == "vldocir-tests" and run.init["mode"] == "offline"
    assert run.name == "test-small/dom_bm25/base"  # as in the store

    for aggregate, values in metrics["aggregates"].items():
        for metric, value in values.items():
            assert run.summary[f"{aggregate}/{metric}"] == pytest.approx(value), f"{aggregate}/{metric}"
    assert run.summary["macro/recallall@10"] == pytest.approx(metrics["aggregates"]["macro"]["recallall@10"])
    assert run.summary["n_queries"] == metrics["n_queries"]

    # The structure x metric table, as logged for the W&B UI.
    (logged,) = run.logged
    table = logged["structure_metrics"]
    assert type(table).__name__ == "Table" and table.columns[0] == "evidence_structure"
    rows = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.data}
    assert set(rows) == set(metrics["breakdowns"]["structure"])
    for structure, values in metrics["breakdowns"]["structure"].items():
        assert rows[structure]["recallall@10"] == pytest.approx(values["recallall@10"])

    # The manifest is the run's config, including what is known only after the benchmark is open.
    config = json.loads(json.dumps(dict(run.config), default=str))
    assert config["benchmark"]["fingerprint"] == manifest["benchmark"]["fingerprint"]
    assert config["run"]["key"] == manifest["run"]["key"]
    assert config["git"] == manifest["git"]
    assert config["config"]["dataset"]["source"] == str(small_bench_dir)


def test_wandb_summary_holds_the_protocols_main_score_per_subset(stub_wandb, isolated_paths):
    from evaluation.test_scope_language import write_graded_bench

    protocol = "+dataset.protocol={name:mteb test,main_score:ndcg@5,subsets:language,scope:corpus,summary:by language}"

    tracker, runs = stub_wandb
    bench = write_graded_bench(isolated_paths / "graded")
    metrics, _, _ = evaluate(f"dataset.source={bench}", "dataset.name=graded-two-lang", protocol, tracker=tracker)
    (run,) = runs
    section = metrics["protocol"]
    assert run.summary["main_score/ndcg@5"] == pytest.approx(section["mean"]["ndcg@5"])
    per_language = {k.split("/")[1]: v for k, v in run.summary.items() if k.startswith("language/")}
    assert per_language == pytest.approx({lang: r["ndcg@5"] for lang, r in section["per_subset"].items()})
    assert set(per_language) == {"en", "fr", "unknown"}


def test_failed_job_still_finishes_its_wandb_run(stub_wandb, isolated_paths):
    tracker, runs = stub_wandb
    missing = isolated_paths / "no-such-benchmark"
    with pytest.raises(Exception, match=re.escape(f"benchmark directory {missing} does not exist")):
        evaluate(f"dataset.source={missing}", "dataset.build=null", tracker=tracker)
    (run,) = runs
    assert run.exit_codes == [1], "the run must be finished, with the failure's exit code"
    assert run.summary == {} and run.logged == []
    assert not (isolated_paths / "results" / "runs").exists()


def test_secrets_reach_wandb_redacted(stub_wandb, small_bench_dir, monkeypatch):
    # A secret reaches the config only by reference to the environment (run.py refuses a literal
    # one on the command line: tests/test_secrets.py); the job resolves the reference.
    tracker, runs = stub_wandb
    monkeypatch.setenv("VLDOCIR_TEST_HUB_TOKEN", CONFIG_SECRET)
    reference = "+retriever.hub_token=${oc.env:VLDOCIR_TEST_HUB_TOKEN}"
    monkeypatch.setattr(sys, "argv", ["run.py", "logger=wandb", reference])
    evaluate(f"dataset.source={small_bench_dir}", "dataset.build=null", reference, tracker=tracker)
    (run,) = runs
    assert run.config["config"]["retriever"]["hub_token"] == REDACTED
    assert f"+retriever.hub_token={REDACTED}" in run.config["overrides"]
    assert run.argv == ["run.py", "logger=wandb", f"+retriever.hub_token={REDACTED}"], "the command line W&B records"
    assert sys.argv == ["run.py", "logger=wandb", reference], "sys.argv is restored"
    assert CONFIG_SECRET not in json.dumps(dict(run.config), default=str)


@pytest.mark.slow
def test_offline_wandb_run_writes_its_run_directory(isolated_paths, small_bench_dir, monkeypatch):
    """`python run.py logger=wandb` with the real wandb, offline: one run directory under the log
    dir, with W&B's run file, its files directory and the structure table."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "vldocir-tests")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(isolated_paths / var.lower()))
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    done = run_py("logger=wandb", f"dataset.source={small_bench_dir}", "dataset.build=null")
    assert done.returncode == 0, done.stderr[-5000:]
    assert newest_entry(isolated_paths / "results", "test-small", "dom_bm25", "base")

    runs = sorted((isolated_paths / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline W&B run under {isolated_paths / 'logs' / 'wandb'}, found {runs}"
    (run_file,) = runs[0].glob("run-*.wandb")
    assert run_file.stat().st_size > 0
    files = runs[0] / "files"
    (table_file,) = (files / "media" / "table").glob("structure_metrics_*.table.json")
    assert json.loads(table_file.read_text())["columns"][0] == "evidence_structure"


def test_redaction_helpers():
    config = {
        "retriever": {
            "id": "x",
            "api_key": "k",
            "hf_token": "",
            "model": {"password": None, "b": 1, "max_visual_tokens": 768},
        },
        "l": [{"secret": "s", "aws_access_key_id": "a", "hf_auth": "h"}],
        "run": {"key": "3f93543a981a65f9"},
        "cache": [{"kind": "run", "key": "2130a3e5f9735b8d"}],
    }
    redacted = redact_secrets(config)
    assert redacted["retriever"]["api_key"] == REDACTED
    assert redacted["retriever"]["hf_token"] == "" and redacted["retriever"]["model"]["password"] is None
    assert redacted["retriever"]["model"]["b"] == 1 and redacted["retriever"]["model"]["max_visual_tokens"] == 768
    assert redacted["l"][0] == {"secret": REDACTED, "aws_access_key_id": REDACTED, "hf_auth": REDACTED}
    assert redacted["run"] == config["run"] and redacted["cache"] == config["cache"], "content hashes are no secrets"
    assert config["retriever"]["api_key"] == "k", "the input is not modified"
    assert redact_overrides(
        ["+retriever.api_key=abc", "n_ctx=32", "logger.TOKEN=x", "~foo.password", "depth=5", "+hf_auth=y"]
    ) == [
        f"+retriever.api_key={REDACTED}",
        "n_ctx=32",
        f"logger.TOKEN={REDACTED}",
        "~foo.password",
        "depth=5",
        f"+hf_auth={REDACTED}",
    ]

"""The query stage's model requests over shards (``build.shards=N`` with ``queries=generated``):
the page descriptions, then each configuration's generation and cleaning, run as job arrays
(construction/shards.py, :class:`QueryShards`) before the build's own query stage, which finds every
answer in the LLM cache. Built from PDFs (no browser) without OCR, against one loopback chat server:
the 3-shard build has the 1-shard build's fingerprint, its driver asks the server nothing, and a
rerun asks nothing at all. Slow: the same through ``hydra/launcher=submitit_local`` (processes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from helpers import PATH_ROOTS, REPO_ROOT, ScriptedVLM, make_pdf
from vldocir.construction.ingest import build_from_html
from vldocir.construction.pdf import PdfConfig
from vldocir.construction.shards import QUERY_STEPS, ShardedStages, shards_line
from vldocir.data.benchmark import load_benchmark
from vldocir.llm_server import ChatServer

BASIC = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}
DOCUMENTS = {
    "memo": [["Quarterly memo", "Revenue rose by four percent."], ["Outlook", "Demand holds in the north."]],
    "notice": [["Board notice", "The meeting moves to May."], ["Agenda", "Item one: the auditor."]],
    "letter": [["Letter to holders", "Dividends stay at one dollar."], ["Risks", "Prices may fall."]],
}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pdfs")
    rows = [
        {"doc_id": doc_id, "source": "sec", "path": str(make_pdf(root / f"{doc_id}.pdf", pages))}
        for doc_id, pages in DOCUMENTS.items()
    ]
    (root / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "index.jsonl"


def _query_overrides(server: ChatServer) -> list[str]:
    return [
        "queries.recorded=null",
        "queries.llm.model=test-vlm",
        f"queries.llm.base_url={server.url}",
        "queries.sampling.configs_per_structure=2",
        "queries.generation.queries_per_config=2",
        "queries.progress=false",
    ]


def _build(index: Path, root: Path, server: ChatServer, shards: ShardedStages | None):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("build", overrides=[f"paths.cache_dir={root / 'cache'}", *_query_overrides(server)])
        return build_from_html(
            index,
            root / "bench",
            root / "cache",
            "query-shards",
            instantiate(cfg.queries),
            pdf=PdfConfig(width=400),
            with_ocr=False,
            shards=shards,
        )


def _asked(summary: dict) -> int:
    return sum(shard.get("asked", 0) for step in QUERY_STEPS for shard in summary[step]["shards"])


def test_three_query_shards_build_the_one_process_benchmark_and_the_driver_asks_nothing(index, tmp_path):
    with ChatServer(responder=ScriptedVLM()) as server:
        one = _build(index, tmp_path / "one", server, None)
        alone = server.served
        stages = ShardedStages(3, BASIC, tmp_path / "submitit")
        three = _build(index, tmp_path / "three", server, stages)  # its own cache: everything asked again
        by_shards = server.served - alone
        again = _build(index, tmp_path / "three", server, stages)
        assert server.served == alone + by_shards  # the rerun: every shard done earlier, the stage from the cache

    assert len(one.queries) > 0 and three.fingerprint == one.fingerprint
    summary = three.info["built_by"]["shards"]["queries"]
    assert summary["configs"] == one.info["built_by"]["queries"]["configs_total"]
    generate, describe = summary["generate"]["shards"], summary["describe"]["shards"]
    assert (
        sum(s["items"] for s in generate) == summary["configs"]
        and sum(s["items"] for s in describe) == summary["pages"]
    )
    assert sum(s["items"] > 0 for s in generate) >= 2  # the configurations spread over the shards
    assert _asked(summary) == by_shards == alone  # the tasks asked what the one-process stage asked, once each
    assert {u["called"] for u in three.info["built_by"]["queries"]["usage"].values()} == {0}  # the driver: nothing
    assert {s["state"] for s in generate + describe} <= {"computed", "empty"}
    rerun = again.info["built_by"]["shards"]["queries"]
    assert {s["state"] for step in QUERY_STEPS for s in rerun[step]["shards"]} <= {"done earlier", "empty"}
    assert again.fingerprint == one.fingerprint
    status = json.loads(
        next((tmp_path / "three" / "cache" / "build").glob("*/shards/queries-generate-*-of-3.json")).read_text()
    )
    assert status["stage"] == "done" and status["step"] == "generate"
    assert "queries: " in shards_line(three.info["built_by"]["shards"])


@pytest.mark.slow
def test_query_shards_run_as_a_submitit_local_array(index, tmp_path):
    """Through the CLI with ``hydra/launcher=submitit_local``: each task is a process of its own."""
    with ChatServer(responder=ScriptedVLM()) as server:
        alone = _build(index, tmp_path / "one", server, None)
        served = server.served
        roots = [f"paths.{key}_dir={tmp_path / 'three' / folder}" for key, folder in PATH_ROOTS.items()]
        args = [f"input={index}", "spec.name=query-shards", "spec.ocr=false", "pdf.width=400"]
        command = [sys.executable, "-m", "vldocir.apps.build", *roots, *args, *_query_overrides(server)]
        command += [f"out_dir={tmp_path / 'three' / 'bench'}", "build.shards=3", "hydra/launcher=submitit_local"]
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.served - served == served  # asked by the tasks, each request once
    three = load_benchmark(tmp_path / "three" / "bench")
    assert three.fingerprint == alone.fingerprint
    assert {u["called"] for u in three.info["built_by"]["queries"]["usage"].values()} == {0}
    assert _asked(three.info["built_by"]["shards"]["queries"]) == served

"""``vldocir.apps.report``: the reports read the results store of the same paths group as ``run.py``.

The acceptance test: ``python run.py paths.results_dir=X`` then ``python -m vldocir.apps.report
paths.results_dir=X`` (and the same with ``VLDOCIR_RESULTS_DIR=X``) reproduces the run's rows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from helpers import REPO_ROOT, evaluate
from report_stores import TEXT_BENCH
from vldocir.reporting.paper import metric_label
from vldocir.reporting.report_tasks import compose_report, run


def table13_row(markdown: str, model: str, aggregate: str) -> dict[str, str]:
    """The cells of one row of ``table13_overall.md``, by column header."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [model, aggregate]:
            return dict(zip(header, cells, strict=True))
    raise AssertionError(f"no row {model} | {aggregate}")


def test_a_run_in_another_results_dir_is_reported(text_bench, tmp_path, monkeypatch, capsys):
    store = tmp_path / "x"
    monkeypatch.delenv("VLDOCIR_RESULTS_DIR", raising=False)
    metrics, _, _ = evaluate(  # python run.py paths.results_dir=X
        f"paths.root_dir={REPO_ROOT}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.results_dir={store}",
        f"dataset.source={text_bench}",
        f"dataset.name={TEXT_BENCH}",
        "dataset.build=null",
    )
    expected = f"{metrics['aggregates']['macro']['recallall@10']:.2f} / "

    for how in ("override", "environment"):
        overrides = ["do=[tables]", "only=[table13_overall]"]
        if how == "override":
            overrides.append(f"paths.results_dir={store}")
        else:
            monkeypatch.setenv("VLDOCIR_RESULTS_DIR", str(store))
        capsys.readouterr()
        assert run(compose_report(overrides)) == 0
        out = capsys.readouterr().out
        assert f"Comparing runs of {TEXT_BENCH} in {store}/runs" in out, how
        assert re.search(r"^  dom_bm25/base: \S+", out, re.M), how  # the store entry used
        assert re.search(r"^  table13_overall +2 of +50 rows reproduced", out, re.M), how
        table = (store / "tables" / "table13_overall.md").read_text()  # out_dir: the results dir
        assert table13_row(table, "DOM-BM25", "Macro")[metric_label("recallall@10")].startswith(expected), how
        assert sorted(p.name for p in (store / "tables").glob("*.md")) == ["README.md", "table13_overall.md"]
        (store / "tables" / "table13_overall.md").unlink()


def test_compose_report_uses_the_paths_group(tmp_path, monkeypatch):
    monkeypatch.delenv("VLDOCIR_ROOT", raising=False)
    monkeypatch.setenv("VLDOCIR_RESULTS_DIR", str(tmp_path / "r"))
    monkeypatch.setenv("VLDOCIR_LOG_DIR", str(tmp_path / "logs"))
    cfg = compose_report()
    assert cfg.paths.root_dir == str(REPO_ROOT)  # not the current directory: notebooks start in notebooks/
    assert cfg.paths.results_dir == cfg.out_dir == str(tmp_path / "r")
    assert cfg.manifest == str(REPO_ROOT / "conf" / "paper_tables.yaml")
    assert cfg.paper_dir == str(REPO_ROOT / "results" / "paper")
    assert list(cfg.do) == ["tables", "figures"] and cfg.logger._target_ == "vldocir.tracking.NullTracker"
    wandb = compose_report(["logger=wandb"], paths={"log_dir": str(tmp_path / "elsewhere")})
    assert wandb.logger.dir == str(tmp_path / "elsewhere") and wandb.paths.results_dir == str(tmp_path / "r")


def test_steps_and_names_are_checked(tmp_path):
    with pytest.raises(ValueError, match="each step is one of tables, figures, check"):
        run(compose_report([f"paths.results_dir={tmp_path}", "do=[tabels]"]))
    with pytest.raises(ValueError, match="neither tables nor figures"):
        run(compose_report([f"paths.results_dir={tmp_path}", "do=[tables]", "only=[table99]"]))
    assert not (tmp_path / "tables").exists()


@pytest.mark.slow
def test_report_py_check_exits_1_on_a_differing_cell(mini_results, tmp_path):
    """``make check``'s command: the store from VLDOCIR_RESULTS_DIR, exit 1 on DIFF, Hydra's own
    output (its config, report.log) under paths.log_dir/report, not in the repository."""
    env = {
        **os.environ,
        "VLDOCIR_RESULTS_DIR": str(mini_results),
        "VLDOCIR_LOG_DIR": str(tmp_path / "logs"),
        "HYDRA_FULL_ERROR": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "vldocir.apps.report", "do=[check]", "quiet=true", "only=[table13_overall]"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"Comparing runs of {TEXT_BENCH} in {mini_results}/runs" in done.stdout
    assert re.search(r"^DIFF +table13_overall +DOM-BM25 \| Macro ", done.stdout, re.M)
    assert re.search(
        r"^Summary: \d+ OK, [1-9]\d* DIFF, [1-9]\d* MISSING, 0 UNPUBLISHED of \d+ cells in 1 tables", done.stdout, re.M
    )
    configs = list((tmp_path / "logs" / "report").glob("*/*/.hydra/config.yaml"))
    assert len(configs) == 1 and "do:\n- check" in configs[0].read_text()
    assert not (mini_results / "tables").exists(), "do=[check] writes no tables"

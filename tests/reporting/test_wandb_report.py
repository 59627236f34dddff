"""The report in W&B without an API key: the sweep-end callback's logger (mode ``online`` unless
``WANDB_MODE`` says otherwise) logs offline, saying so in one line, instead of failing."""

from __future__ import annotations

import logging

import pytest

from report_stores import MANIFEST, PAPER_DIR
from vldocir.reporting.paper import load_spec
from vldocir.reporting.report_tasks import compose_report
from vldocir.reporting.store_view import ResultsView
from vldocir.reporting.tables import build_tables
from vldocir.reporting.wandb_report import api_key_configured, log_report, report_mode
from vldocir.tracking.wandb import WandbTracker


@pytest.fixture
def no_wandb_key(tmp_path, monkeypatch):
    """No key anywhere wandb looks: no WANDB_API_KEY, no mode, an empty home (no ~/.netrc)."""
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "NETRC", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    return tmp_path / "home"


def test_a_key_is_found_where_wandb_login_puts_it(no_wandb_key, monkeypatch, caplog):
    assert not api_key_configured()
    with caplog.at_level(logging.WARNING, logger="vldocir.reporting.wandb_report"):
        assert report_mode("online") == "offline"
        assert report_mode("disabled") == "disabled" and report_mode("offline") == "offline"
    assert len(caplog.records) == 1 and "no API key found" in caplog.records[0].getMessage()
    (no_wandb_key / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "0" * 40 + "\n")
    (no_wandb_key / ".netrc").chmod(0o600)
    assert api_key_configured() and report_mode("online") == "online"
    (no_wandb_key / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    assert report_mode("online") == "online"


@pytest.mark.slow  # an offline W&B run: wandb starts its service process (~15 s)
def test_the_sweep_end_logger_without_key_or_mode_logs_offline(no_wandb_key, tmp_path, caplog):
    """The logger TablesOnSweepEnd composes (logger=wandb, the sweep's paths) is online with no
    WANDB_MODE; with no key its report goes to an offline run under the sweep's log dir."""
    from hydra.utils import instantiate

    cfg = compose_report(["logger=wandb"], paths={"log_dir": str(tmp_path / "logs")})
    logger = instantiate(cfg.logger)
    assert isinstance(logger, WandbTracker) and logger.mode == "online"
    spec = load_spec(MANIFEST, PAPER_DIR)
    tables = build_tables(spec, ResultsView(tmp_path / "no-results", spec.benchmark), ["table5_structure"])
    with caplog.at_level(logging.WARNING, logger="vldocir.reporting.wandb_report"):
        where = log_report(tables, {}, logger, benchmark=spec.benchmark)
    assert [r.getMessage()[:24] for r in caplog.records] == ["W&B: no API key found (W"]
    runs = sorted((tmp_path / "logs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and where.startswith(str(runs[0]))
    assert list((runs[0] / "files" / "media" / "table" / "tables").glob("table5_structure_*.table.json"))

"""Nothing left behind (issue 35, item 4): a build that fails or is stopped leaves no partial output
directory and no running Tesseract or browser; a full disk under Hydra's own config save is one line.

In process, but for the last test (slow lane): a build killed by SIGTERM and SIGKILL at its render
and OCR stages, then rerun to the same fingerprint.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import REPO_ROOT, dead_pid, make_pdf
from vldocir.cache import staged_directory
from vldocir.data.benchmark import load_benchmark
from vldocir.errors import ConfigError
from vldocir.subprocesses import SIGTERM_STATUS, Terminated, sigterm_as_interrupt


def siblings(path: Path) -> list[str]:
    """What lies beside ``path`` under its name (the output itself, staging and set-aside folders)."""
    return sorted(p.name for p in path.parent.iterdir() if p.name.lstrip(".").startswith(path.name))


# -- the staging directory ------------------------------------------------------------------------------


def test_a_staged_directory_becomes_the_output_only_once_complete(tmp_path):
    out = tmp_path / "bench"

    def fail_after_pages(stop: BaseException) -> None:
        with staged_directory(out) as staging:
            (staging / "pages").mkdir()
            (staging / "pages" / "page-000.png").write_bytes(b"x" * 1000)
            raise stop

    for stop in (ValueError("a row cites page 99"), KeyboardInterrupt(), Terminated()):
        with pytest.raises(type(stop)):
            fail_after_pages(stop)
        assert siblings(out) == [], stop
    with staged_directory(out) as staging:
        (staging / "benchmark.json").write_text("one")
        assert not out.exists()
    assert siblings(out) == ["bench"] and (out / "benchmark.json").read_text() == "one"
    with pytest.raises(ValueError, match="page 99"):  # an earlier output stays as it was
        fail_after_pages(ValueError("page 99"))
    assert siblings(out) == ["bench"] and (out / "benchmark.json").read_text() == "one"
    with staged_directory(out) as staging:  # ... and a complete one replaces it whole
        (staging / "benchmark.json").write_text("three")
    assert siblings(out) == ["bench"] and [p.name for p in out.iterdir()] == ["benchmark.json"]
    assert (out / "benchmark.json").read_text() == "three"


def test_an_output_that_is_a_link_is_replaced_where_it_points(tmp_path):
    """``data/bench -> /scratch/bench``: the new benchmark lands on /scratch, the link stays."""
    scratch, data = tmp_path / "scratch", tmp_path / "data"
    (scratch / "bench").mkdir(parents=True)
    (scratch / "bench" / "benchmark.json").write_text("old")
    data.mkdir()
    (data / "bench").symlink_to(scratch / "bench")
    with staged_directory(data / "bench") as staging:
        (staging / "benchmark.json").write_text("new")
    assert (data / "bench").is_symlink() and siblings(data / "bench") == ["bench"]
    assert siblings(scratch / "bench") == ["bench"] and (scratch / "bench" / "benchmark.json").read_text() == "new"


def test_the_staging_directory_of_a_killed_build_is_removed_by_the_next(tmp_path):
    from vldocir.leases import host_name

    out = tmp_path / "bench"
    dead = dead_pid()
    debris = tmp_path / f".bench.staging-{host_name()}-{dead}-1"
    (debris / "pages").mkdir(parents=True)
    with staged_directory(out) as staging:
        (staging / "benchmark.json").write_text("{}")
    assert siblings(out) == ["bench"]


# -- a build that fails after its pages are made --------------------------------------------------------

PAGE_LINES = [["Quarterly report, page one", "Revenue grew by 12 percent."], ["Second page", "Prices stay flat."]]


@pytest.fixture
def pdf_build(tmp_path):
    """``build(query rows, out)``: an own-document build (one PDF: no browser) with the user's
    queries; OCR is left out (``spec.ocr=false``) to keep it fast."""
    from vldocir.construction import ingest
    from vldocir.construction.pdf import PdfConfig
    from vldocir.queries.user_queries import UserQueries

    docs = tmp_path / "docs"
    docs.mkdir()
    make_pdf(docs / "report.pdf", PAGE_LINES)

    def build(rows: list[dict], out: Path):
        queries = tmp_path / "queries.jsonl"
        queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return ingest.build_from_html(
            docs,
            out,
            tmp_path / "cache",
            "own",
            UserQueries(queries),
            pdf=PdfConfig(width=300),
            source="sec",
            with_ocr=False,
        )

    return build


def test_an_own_document_build_failing_after_its_pages_leaves_no_output(pdf_build, tmp_path):
    """The issue's case: a query row citing page 99 fails after the pages are written (it left
    ``<out>/pages/`` behind); an unknown element likewise. The rasters stay in the cache."""
    out = tmp_path / "data" / "own"
    for bad in ("report:99", "report/e999999"):
        with pytest.raises(ConfigError, match="row 1"):
            pdf_build([{"question": "What grew?", "evidence": bad}], out)
        assert siblings(out) == [], bad
    assert list((tmp_path / "cache" / "pdf").rglob("*.jpg")), "the rendered pages stay in the cache"
    bench = pdf_build([{"question": "What grew?", "evidence": "report:1"}], out)
    assert bench.root == out and siblings(out) == ["own"] and len(bench.pages) == 2
    with pytest.raises(ConfigError, match="no page 99"):  # a failed rebuild keeps the complete output
        pdf_build([{"question": "What grew?", "evidence": "report:99"}], out)
    assert siblings(out) == ["own"] and load_benchmark(out).fingerprint == bench.fingerprint


def test_an_out_dir_holding_other_things_is_refused_before_any_work(pdf_build, tmp_path):
    """The output replaces ``out_dir`` whole: a folder that is not a benchmark, or that holds the
    cache, is refused (its files are never deleted)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="holds no benchmark"):
        pdf_build([{"question": "q", "evidence": "report:1"}], mine)
    with pytest.raises(ConfigError, match="which the build's output would replace"):
        pdf_build([{"question": "q", "evidence": "report:1"}], tmp_path)
    assert (mine / "notes.txt").read_text() == "keep" and not (tmp_path / "cache").exists()


# -- children and signals ---------------------------------------------------------------------------------

FAKE_TESSERACT = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "tesseract 5.3.0"; exit 0; fi
echo $$ >> "{pids}"
exec sleep 60
"""


def test_an_interrupted_ocr_kills_its_tesseract_processes_and_starts_no_more(tmp_path):
    """SIGTERM (as :class:`Terminated`) in the middle of the OCR: the running ``tesseract`` processes
    are killed and the queued pages never start one; the interrupt comes out at once."""
    from PIL import Image

    from vldocir.construction.ocr import OcrConfig, ocr_pages

    pids = tmp_path / "pids"
    tesseract = tmp_path / "tesseract"
    tesseract.write_text(FAKE_TESSERACT.format(pids=pids))
    tesseract.chmod(0o755)
    pages = []
    for i in range(40):
        image = Image.new("RGB", (40, 20), "white")
        image.putpixel((i % 40, 5), (0, 0, 0))  # not of one colour: OCR'd
        image.save(tmp_path / f"p{i}.png")
        pages.append(tmp_path / f"p{i}.png")

    def terminate_when_running():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(pid_list(pids)) < 2:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_when_running, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(Terminated), sigterm_as_interrupt():
        ocr_pages(pages, tmp_path / "cache", OcrConfig(workers=2, tesseract_cmd=str(tesseract)))
    assert time.monotonic() - started < 20, "killed, not waited for (each sleeps 60 s)"
    running = pid_list(pids)
    assert len(running) == 2, "two workers, one process each; the queued batches never started"
    for pid in running:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def pid_list(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_sigterm_is_one_line_and_status_143(capsys):
    from vldocir.apps.app import one_line_errors

    def terminated() -> None:
        with one_line_errors("build"), sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends

    with pytest.raises(SystemExit) as stopped:
        terminated()
    assert stopped.value.code == SIGTERM_STATUS == 143
    assert capsys.readouterr().err.splitlines() == ["build: terminated (SIGTERM)"]


@pytest.mark.skipif(not os.access("/dev/full", os.W_OK), reason="needs /dev/full (Linux)")
def test_a_full_disk_under_hydras_own_config_save_is_one_line(
    isolated_paths, tmp_path, monkeypatch, capsys, restored_logging
):
    """Hydra writes ``.hydra/config.yaml`` before the app's task (and its wrapper) runs; a real ENOSPC
    there (the file is a link to /dev/full, which fails every write with ENOSPC) is one line naming
    the file and the free space of its disk, status 2, not Hydra's traceback and status 1."""
    from vldocir.apps.app import ERROR_STATUS, hydra_app

    ran = []

    @hydra_app("audit", config_name="audit")
    def main(cfg):
        ran.append(cfg)

    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").symlink_to("/dev/full")
    monkeypatch.setattr(sys, "argv", ["audit.py", f"hydra.run.dir={run_dir}"])
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err.splitlines()
    assert stopped.value.code == ERROR_STATUS and not ran
    assert len(err) == 1 and err[0].startswith(f"audit error: disk full writing {run_dir}/.hydra/config.yaml ("), err
    assert " free on /" in err[0]


# -- killed for real (slow lane) ------------------------------------------------------------------------


def _proxy_doc(name: str, sections: int) -> str:
    rows = "".join(
        f"<h2>Proposal {s}</h2><p>Director {s} of {name} has served since {2001 + s}; annual retainer "
        f"${110 + 7 * s},000 and committee fees.</p>"
        f"<table><tr><th>Name</th><th>Salary</th></tr><tr><td>Executive {s}</td><td>${500 + s},000</td></tr></table>"
        for s in range(sections)
    )
    return f"<!doctype html><html><head><title>{name}</title></head><body><h1>{name} proxy</h1>{rows}</body></html>"


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("tesseract") is None or not sys.platform.startswith("linux"),
    reason="needs Chromium and Tesseract (scripts/setup.sh installs both), and Linux",
)
def test_a_build_killed_at_any_stage_leaves_nothing_and_the_rerun_matches(tmp_path):
    """``python -m vldocir.apps.build`` killed by SIGTERM and by SIGKILL while Chromium renders and
    while Tesseract reads: no output directory (nor staging folder) and no process of the build left
    running; the rerun resumes and gives the fingerprint of a build from a fresh cache."""
    import psutil

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("orbel", "tarvo"):
        (docs / f"{name}.html").write_text(_proxy_doc(name.title(), sections=40))
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "Who served?", "evidence": "orbel:1"}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(VLDOCIR_ROOT=str(tmp_path), PYTHONPATH=str(REPO_ROOT / "src"))
    out = tmp_path / "data" / "own"

    def build(cache: str, stop_at: str | None = None, signum: int = signal.SIGTERM, after_s: float = 0.0):
        """Run the build; with ``stop_at``, send ``signum`` once a process of that name has run under it
        for ``after_s``."""
        command = [sys.executable, "-m", "vldocir.apps.build", f"input={docs}", "folder.source=sec"]
        command += ["spec.name=own", "queries=file", f"queries.path={tmp_path / 'q.jsonl'}", f"paths.cache_dir={cache}"]
        command += ["+ocr.workers=1"]  # one tesseract process reads every page: seconds of work left to orphan
        build = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen: dict[int, psutil.Process] = {}
        stopped = False
        while stop_at and build.poll() is None and not stopped:
            try:
                family = psutil.Process(build.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for child in family:
                seen.setdefault(child.pid, child)
                with contextlib.suppress(psutil.NoSuchProcess):
                    stopped = stopped or (stop_at in child.name() and time.time() - child.create_time() >= after_s)
            if stopped:
                build.send_signal(signum)
            time.sleep(0.05)
        stdout, stderr = build.communicate(timeout=600)
        # The kernel kills tesseract at once (PR_SET_PDEATHSIG; an orphan would read on, to its next
        # page's output at least); Chromium and the rest end on their pipes' EOF.
        time.sleep(0.1)
        orphans = [p for p in alive(seen.values()) if "tesseract" in p]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and alive(seen.values()):
            time.sleep(0.1)
        return build.returncode, stdout.decode(), stderr.decode(), stopped, orphans + alive(seen.values())

    def alive(processes) -> list[str]:
        found = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(f"{process.pid} {process.name()}")
            except psutil.NoSuchProcess:
                pass
        return found

    cache = str(tmp_path / "cache")
    for stage, signum in (  # tesseract: once it has read its pages (cut short, it stops by itself)
        ("chromium", signal.SIGTERM),
        ("chromium", signal.SIGKILL),
        ("tesseract", signal.SIGKILL),
        ("tesseract", signal.SIGTERM),
    ):
        code, _, stderr, stopped, left = build(cache, stage, signum, after_s=2.0 if stage == "tesseract" else 0.0)
        where = f"{signal.Signals(signum).name} while {stage} runs"
        assert stopped, f"{where}: the build ended before {stage} ran ({code}): {stderr[-2000:]}"
        assert not left, f"{where}: left running: {left}"
        deadline = time.monotonic() + 5  # after a SIGKILL the watcher removes the staging folder
        while time.monotonic() < deadline and siblings(out):
            time.sleep(0.1)
        assert not out.parent.exists() or siblings(out) == [], f"{where}: {siblings(out)}"
        if signum == signal.SIGTERM:
            assert code == SIGTERM_STATUS and stderr.strip().splitlines()[-1] == "build: terminated (SIGTERM)", stderr
        else:
            assert code == -signal.SIGKILL
    code, _, stderr, _, _ = build(cache)
    assert code == 0, stderr[-3000:]
    rerun = load_benchmark(out)
    code, _, stderr, _, _ = build(str(tmp_path / "fresh-cache"))
    assert code == 0, stderr[-3000:]
    assert load_benchmark(out).fingerprint == rerun.fingerprint

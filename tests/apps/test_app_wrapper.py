"""The apps' one wrapper (vldocir.apps.app), in-process: what becomes one line and status 2, what
keeps its traceback, the secret guard before Hydra, and write errors that name their file.

The subprocess runs of every app are in test_app_errors.py (slow lane).
"""

from __future__ import annotations

import errno
import resource
import signal
import sys

import numpy as np
import pyarrow as pa
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from vldocir.apps.app import ERROR_STATUS, INTERRUPTED_STATUS, hydra_app, one_line_errors, unknown_option
from vldocir.errors import ConfigError, VldocirError
from vldocir.io import WriteError, atomic_write_json, atomic_write_parquet, naming_path


def stopped_with(app: str, raise_it, capsys) -> tuple[int, list[str]]:
    """Run ``raise_it()`` inside the wrapper; (exit status, non-empty stderr lines)."""
    with pytest.raises(SystemExit) as stopped, one_line_errors(app):
        raise_it()
    return stopped.value.code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# Exceptions that are signals inside the package, never shown to a user, with the reason.
NOT_DOMAIN_ERRORS = {
    "Retryable": "an attempt's signal to the retry loop; callers turn the last one into their own error",
}


def test_every_exception_class_of_the_package_is_a_domain_error():
    """Every exception class defined under src/vldocir derives from VldocirError (but private ones
    and the signals of NOT_DOMAIN_ERRORS)."""
    import ast
    from pathlib import Path

    import vldocir

    root = Path(vldocir.__file__).parent
    found = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and node.name not in NOT_DOMAIN_ERRORS:
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Timeout")) or b in ("LookupError",) for b in bases):
                    found[node.name] = path.relative_to(root.parent).with_suffix("").as_posix().replace("/", ".")
    assert len(found) >= 25, found
    import importlib

    not_domain = [
        f"{module}.{name}"
        for name, module in found.items()
        if not issubclass(getattr(importlib.import_module(module), name), VldocirError)
    ]
    assert not not_domain, f"give these VldocirError as a base: {not_domain}"


def test_a_domain_error_is_one_line_and_status_2(capsys):
    def fail():
        raise ConfigError("eval.ks=[0] holds a cut-off below 1")

    assert stopped_with("run", fail, capsys) == (ERROR_STATUS, ["run error: eval.ks=[0] holds a cut-off below 1"])


def test_a_message_of_several_lines_becomes_one(capsys):
    class Spread(VldocirError):
        pass

    def fail():
        raise Spread("could not load the model from hub id x/y:\n  offline\n\nset local_path")

    status, lines = stopped_with("build", fail, capsys)
    assert status == ERROR_STATUS
    assert lines == ["build error: could not load the model from hub id x/y: offline set local_path"]


def test_a_bug_keeps_its_traceback(capsys):
    with pytest.raises(KeyError, match="oops"), one_line_errors("run"):
        raise KeyError("oops")
    with pytest.raises(ValueError, match="not a domain error"), one_line_errors("run"):
        raise ValueError("not a domain error")
    assert capsys.readouterr().err == ""


def test_ctrl_c_is_one_line_and_status_130(capsys):
    def interrupt():
        raise KeyboardInterrupt

    assert stopped_with("collect", interrupt, capsys) == (INTERRUPTED_STATUS, ["collect: interrupted"])


def test_an_os_error_names_its_path(tmp_path, capsys):
    missing = tmp_path / "no" / "such.csv"
    status, lines = stopped_with("audit", missing.read_text, capsys)
    assert status == ERROR_STATUS and lines == [f"audit error: No such file or directory: {missing}"]


def test_a_constructor_error_under_instantiate(capsys):
    """hydra.utils.instantiate wraps what a constructor raises: a domain error is shown as itself,
    a parameter check (ValueError/TypeError) as one line naming the config node."""
    node = OmegaConf.create({"spec": {"_target_": "vldocir.construction.render.config.RenderConfig", "bogus": 1}})
    status, lines = stopped_with("build", lambda: instantiate(node.spec), capsys)
    assert status == ERROR_STATUS and len(lines) == 1
    assert lines[0].startswith("build error: spec: ") and "unexpected keyword argument 'bogus'" in lines[0]

    node = OmegaConf.create(
        {"x": {"_target_": "vldocir.retrieval.checkpoints.resolve_local_path", "value": "package:no_such_package_here"}}
    )
    status, lines = stopped_with("run", lambda: instantiate(node.x), capsys)
    assert status == ERROR_STATUS and lines == [
        "run error: checkpoint.local_path=package:no_such_package_here: package no_such_package_here is not installed "
        "(uv sync installs the dev group; or set local_path to a model directory)"
    ]


@pytest.fixture
def file_size_limit():
    """Limit the size of files this process writes to 16 kB (RLIMIT_FSIZE): a write beyond it fails
    with EFBIG, a real write error of the kernel (SIGXFSZ ignored, so the process is not killed)."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_atomic_writers_name_the_file_of_a_failed_write(tmp_path, file_size_limit):
    target = tmp_path / "out" / "table.parquet"
    with pytest.raises(WriteError) as raised:
        atomic_write_parquet(pa.table({"x": np.arange(100_000, dtype=np.float64)}), target, compression="none")
    assert raised.value.errno == errno.EFBIG and raised.value.filename == str(target)
    assert str(raised.value).startswith(f"file too large writing {target} (") and " free on " in str(raised.value)
    assert isinstance(raised.value, OSError), "callers that catch OSError around a write keep working"
    assert not target.exists() and not list(target.parent.iterdir()), "no temporary file is left behind"

    with pytest.raises(WriteError, match=f"file too large writing {tmp_path / 'x.json'}"):
        atomic_write_json(list(range(20_000)), tmp_path / "x.json")


def test_a_short_write_without_an_errno_names_the_file_and_the_free_space(tmp_path, file_size_limit):
    """numpy reports a short write as ``OSError('10000 requested and 1984 written')`` (items): no errno, no file."""
    shard = tmp_path / "shard"
    shard.mkdir()
    with pytest.raises(WriteError) as raised, naming_path(shard):
        np.save(shard / "vectors.npy", np.zeros(10_000))
    message = str(raised.value)
    assert message.startswith(f"cannot write {shard}: 10000 requested and ") and " written (" in message
    assert " free on " in message and raised.value.errno is None


def test_a_write_error_that_names_its_file_passes_unchanged(tmp_path):
    with pytest.raises(FileNotFoundError) as raised, naming_path(tmp_path / "elsewhere"):
        (tmp_path / "no" / "dir" / "file").write_text("")
    assert raised.value.filename == str(tmp_path / "no" / "dir" / "file")


def test_a_write_error_survives_pickling(tmp_path):
    """Raised in a worker process (document-context builds), re-raised in the parent."""
    import pickle

    error = WriteError(tmp_path / "a.npy", errno.ENOSPC, "No space left on device")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.errno == errno.ENOSPC and str(again).startswith("disk full writing ")


def test_the_app_refuses_a_secret_before_hydra_writes_anything(tmp_path, monkeypatch, capsys):
    ran = []

    @hydra_app("audit", config_name="audit")
    def main(cfg):
        ran.append(cfg)

    monkeypatch.setattr(sys, "argv", ["audit.py", f"paths.log_dir={tmp_path}", "+hf_token=sekrit-value"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 2 and not ran and not list(tmp_path.iterdir()), "Hydra never started"
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'hf_token'" in err and "sekrit-value" not in err


def test_an_app_run_in_process(isolated_paths, monkeypatch, capsys, restored_logging):
    """The whole wrapper: composed from conf/ by Hydra, the task's error one line, status 2, and the
    job named after the app's file (Hydra's log file ``<name>.log``), not after the wrapper's."""

    @hydra_app("audit", config_name="audit")
    def main(cfg):
        assert cfg.do == "nonsense"
        raise ConfigError(f"do={cfg.do!r}: use export, import or census")

    monkeypatch.setattr(sys, "argv", ["audit.py", "do=nonsense", "hydra.job.chdir=false"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == ERROR_STATUS
    assert capsys.readouterr().err.splitlines() == ["audit error: do='nonsense': use export, import or census"]
    logs = sorted(p.name for p in (isolated_paths / "logs").rglob("*.log"))
    assert logs == ["test_app_wrapper.log"], logs


def test_an_error_of_another_kind_inside_a_write_block_is_not_called_a_write(tmp_path):
    """A network error raised while an artifact is built (no file named) keeps its own kind."""
    with pytest.raises(ConnectionRefusedError) as raised, naming_path(tmp_path / "artifact"):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert not isinstance(raised.value, WriteError)


def test_a_full_disk_while_copying_names_the_copy(tmp_path, capsys):
    """shutil names a failed copy's source and destination; the line names the file being written."""
    error = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "src.png"), None, str(tmp_path / "dst.png"))

    def copy():
        raise error

    status, lines = stopped_with("run", copy, capsys)
    assert status == ERROR_STATUS and len(lines) == 1
    assert lines[0].startswith(f"run error: disk full writing {tmp_path / 'dst.png'} (") and " free on " in lines[0]


def test_an_unknown_config_option_is_one_line_before_hydra_starts(tmp_path, monkeypatch, capsys):
    ran = []

    @hydra_app("export_benchmark", config_name="export_benchmark")
    def main(cfg):
        ran.append(cfg)

    monkeypatch.setattr(sys, "argv", ["x.py", f"paths.log_dir={tmp_path}", "dataset=nosuch", "out=/tmp/x"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == ERROR_STATUS and not ran and not list(tmp_path.iterdir())
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "export_benchmark error: dataset=nosuch: conf/dataset/ has no option 'nosuch' (one of: "
    )
    assert " mini, " in err[0]
    assert unknown_option(["x", "dataset=mini", "dataset=null", "retriever=a,b", "hydra/launcher=x", "depth=5"]) is None


def test_an_unset_mandatory_value_is_one_line_naming_its_key(capsys):
    cfg = OmegaConf.create({"out": "???"})
    code, lines = stopped_with("export_benchmark", lambda: cfg.out, capsys)
    assert (code, lines) == (
        ERROR_STATUS,
        ["export_benchmark error: out: a value is required (add out=... to the command line)"],
    )

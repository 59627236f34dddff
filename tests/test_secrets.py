"""Secrets: one redaction rule (vldocir/manifest.py), run.py's refusal of secret-looking overrides
(launch.py), and end to end, that no secret from the environment is written anywhere.

The end-to-end tests plant unique values in the environment variables that hold this project's
secrets, run `python run.py` as a subprocess (a run mirrored to W&B offline, and a submitit sweep),
then read every file under the test's temp dir (results, cache, logs, W&B, submitit pickles) as
bytes: none may hold a planted value. They grep everything rather than known paths on purpose: the
layouts of the results store and of W&B's run directory change, and a leak lands where nobody looks.
"""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from helpers import REPO_ROOT, compose_cfg, run_py
from vldocir import store
from vldocir.launch import refuse_secret_overrides, secret_overrides
from vldocir.manifest import (
    REDACTED,
    RedactingFilter,
    environment_secrets,
    is_secret_key,
    redact_overrides,
    redact_secrets,
    redact_text,
)

SECRET_ENV_VARS = ("WANDB_API_KEY", "HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY")
# Each as the user audit found it reaching manifests and Hydra's logs; the value is distinctive.
REFUSED = [
    ("+aws_access_key_id", "aws_access_key_id"),
    ("+hf_auth", "hf_auth"),
    ("+api_key", "api_key"),
    ("+my_token", "my_token"),
    ("logger.password", "logger.password"),
    ("+credentials.x", "credentials.x"),
    ("+private_key", "private_key"),
    ("++hf_auth", "hf_auth"),
    ("+foo.password", "foo.password"),
    ("logger.api_key", "logger.api_key"),
    ("+retriever.accessToken", "retriever.accessToken"),
    ("+session_cookie", "session_cookie"),
]


def _secret() -> str:
    return f"sekrit-{uuid.uuid4().hex}"


# --- the rule ----------------------------------------------------------------------------------


def _conf_key_names() -> set[str]:
    names = set()
    for path in (REPO_ROOT / "conf").rglob("*.yaml"):
        names |= set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*):", path.read_text(), re.M))
    return names


def test_no_config_key_of_the_project_looks_like_a_secret():
    """The rule must not redact (or refuse to override) any key the project's configs use."""
    names = _conf_key_names()
    assert {"max_visual_tokens", "exclude_keys", "hub_id", "query_batch_size"} <= names  # the scan works
    assert sorted(n for n in names if is_secret_key(n)) == []


@pytest.mark.parametrize(
    "name",
    [
        "key",
        "run.key",
        "keys",
        "exclude_keys",
        "max_visual_tokens",
        "page_block_tokens",
        "tokenizer",
        "author",
        "authors",
        "pad_token",
        "eos_token_id",
        "kv_sep",
        "hub_id",
        "cache_policy",
        "PWD",
        "PATH",
    ],
)
def test_rule_keeps_ordinary_names(name):
    assert not is_secret_key(name)


@pytest.mark.parametrize(
    "name",
    [
        "aws_access_key_id",
        "hf_auth",
        "api_key",
        "apikey",
        "apiKey",
        "my_token",
        "hftoken",
        "password",
        "passwd",
        "credentials",
        "private_key",
        "client_secret",
        "session_id",
        "cookie",
        "access_key",
        "logger.api_key",
        *SECRET_ENV_VARS,
        "AWS_SESSION_TOKEN",
        "GITHUB_TOKEN",
    ],
)
def test_rule_flags_secret_names(name):
    assert is_secret_key(name)


def test_environment_secrets_are_values_of_secret_looking_variables():
    environ = {
        "HF_TOKEN": "hf_0123456789",
        "OPENAI_API_KEY": "sk-0123456789",
        "PATH": "/usr/bin:/bin",
        "XDG_SESSION_ID": "3",  # too short to scrub from text
        "SSH_AUTH_SOCK": "/tmp/ssh-abc/agent.1",
        "HF_TOKEN_PATH": "/home/u/.cache/hf/token",  # locations, not secrets
    }
    assert sorted(environment_secrets(environ)) == ["hf_0123456789", "sk-0123456789"]


def test_redaction_scrubs_environment_values_under_any_key(monkeypatch):
    secret = _secret()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    config = {"note": f"Bearer {secret}", "headers": [secret], "run": {"key": "3f93543a981a65f9"}, "n": 3}
    assert redact_secrets(config) == {
        "note": f"Bearer {REDACTED}",
        "headers": [REDACTED],
        "run": {"key": "3f93543a981a65f9"},
        "n": 3,
    }
    assert redact_overrides([f"+note={secret}", "depth=5"]) == [f"+note={REDACTED}", "depth=5"]
    assert redact_text(f"token is {secret}.") == f"token is {REDACTED}."


def test_log_records_are_scrubbed(monkeypatch):
    secret = _secret()
    monkeypatch.setenv("HF_TOKEN", secret)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("vldocir.test_secrets")
    logger.addHandler(handler)
    try:
        logger.warning("download with %s failed", secret)
        try:
            raise RuntimeError(f"401 for {secret}")
        except RuntimeError:
            logger.exception("hub")
    finally:
        logger.removeHandler(handler)
    assert secret not in out.getvalue()
    assert out.getvalue().count(REDACTED) == 2


# --- refusal on the command line ---------------------------------------------------------------


def _refusal(argv: list[str]) -> str:
    stream = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        refuse_secret_overrides(argv, stream=stream)
    assert exit_.value.code == 2
    return stream.getvalue()


@pytest.mark.parametrize(("prefix", "named"), REFUSED, ids=[p for p, _ in REFUSED])
def test_secret_override_is_refused_naming_the_key_not_the_value(prefix, named):
    value = _secret()
    message = _refusal(["run.py", "retriever=dom_bm25", f"{prefix}={value}"])
    assert message.count("\n") == 1 and message.endswith("\n"), "one line"
    assert f"'{named}'" in message and value not in message
    assert "environment" in message and "HF_TOKEN" in message


def test_sweep_of_secrets_is_refused():
    message = _refusal(["run.py", "-m", "hydra/launcher=submitit_local", "+token=sekrit-a,sekrit-b"])
    assert "'token'" in message and "sekrit" not in message


@pytest.mark.parametrize(
    "argv",
    [
        ["run.py"],
        ["run.py", "retriever=colqwen25", "setting=ctx", "n_ctx=256", "eval.ks=[3],[5]", "-m"],
        ["run.py", "hydra/launcher=slurm_h100", "hydra.job.config.override_dirname.exclude_keys=[seed]"],
        ["run.py", "~foo.password"],  # a deletion carries no value
        ["run.py", "+retriever.hub_token=${oc.env:HF_TOKEN}", "+x.api_key='${oc.env:MY_KEY}'"],  # references
        ["run.py", "-cd", "/tmp/token=1/conf", "--cfg", "job"],  # a flag's argument is no override
        ["run.py", "+retriever.model.processor_kwargs.pad_token=<pad>", "+run.key=abc"],
    ],
)
def test_ordinary_overrides_pass(argv):
    assert secret_overrides(argv) == []
    refuse_secret_overrides(argv)  # returns


def test_override_holding_an_environment_secret_is_refused(monkeypatch):
    """``+retriever.note=$HF_TOKEN``: the shell expands the variable, the key looks innocent."""
    value = _secret()
    monkeypatch.setenv("HF_TOKEN", value)
    message = _refusal(["run.py", f"+retriever.note=Bearer {value}"])
    assert "'retriever.note'" in message and value not in message


def test_env_reference_with_a_literal_default_is_refused():
    assert secret_overrides(["run.py", "+hf_token=${oc.env:HF_TOKEN,hf_literal}"]) == ["hf_token"]


def test_secret_keys_are_left_out_of_job_directory_names(isolated_paths):
    cfg = compose_cfg("+hf_token=x", "+retriever.hub_token=${oc.env:HF_TOKEN}", "depth=50", keep_hydra=True)
    assert cfg.hydra.job.override_dirname == "depth=50"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [["+aws_access_key_id"], ["-m", "hydra/launcher=submitit_local", "+my_token"]], ids=["run", "sweep"]
)
def test_run_py_refuses_before_hydra_writes_anything(isolated_paths, args):
    value = _secret()
    *flags, key = args
    done = run_py(*flags, f"{key}={value},{value}x" if "-m" in flags else f"{key}={value}", timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.count("\n") == 1 and f"'{key.lstrip('+')}'" in done.stderr
    assert value not in done.stdout + done.stderr
    assert list(isolated_paths.iterdir()) == [], "nothing is written: no logs, no .hydra, no results"


@pytest.mark.slow
def test_build_py_refuses_too(isolated_paths):
    value = _secret()
    done = subprocess.run(
        [sys.executable, "-m", "vldocir.apps.build", f"+hf_auth={value}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "'hf_auth'" in done.stderr and value not in done.stderr
    assert list(isolated_paths.iterdir()) == []


# --- end to end: environment secrets are written nowhere ---------------------------------------


@pytest.fixture
def planted(isolated_paths, monkeypatch) -> dict[str, str]:
    """Unique values in the secret environment variables; W&B's own directories under tmp too."""
    secrets = {var: _secret() for var in SECRET_ENV_VARS}
    for var, value in secrets.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "vldocir-tests")
    for var, sub in (
        ("WANDB_CONFIG_DIR", "wandb-config"),
        ("WANDB_CACHE_DIR", "wandb-cache"),
        ("WANDB_DATA_DIR", "wandb-data"),
    ):
        monkeypatch.setenv(var, str(isolated_paths / sub))
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    return secrets


# Pull two secrets into the config by reference: under a secret-looking key (redacted by name) and
# under an innocent one (scrubbed by value). Hydra records the references only.
REFERENCES = ("+retriever.hub_token=${oc.env:HF_TOKEN}", "+retriever.note=${oc.env:OPENAI_API_KEY}")


def _leaks(root: Path, secrets: dict[str, str], *outputs: str) -> list[str]:
    """``VAR in path`` for every file under ``root`` (read as bytes) holding a planted value."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{var} in {path.relative_to(root)}" for var, value in secrets.items() if value.encode() in data]
    found += [f"{var} in console output" for var, value in secrets.items() for out in outputs if value in out]
    return found


def _manifests(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.rglob(store.MANIFEST_FILE))]


def _check_manifest(manifest: dict) -> None:
    retriever = manifest["config"]["retriever"]
    assert retriever["hub_token"] == REDACTED and retriever["note"] == REDACTED
    assert f"+retriever.hub_token={REDACTED}" in manifest["overrides"], "the overrides, as recorded, too"
    # The manifest's own keys are content hashes, not secrets: they stay.
    assert re.fullmatch(r"[0-9a-f]{16}", manifest["run"]["key"]), manifest["run"]
    assert manifest["cache"] and all(re.fullmatch(r"[0-9a-f]{16}", e["key"]) for e in manifest["cache"]), manifest[
        "cache"
    ]


@pytest.mark.slow
def test_run_with_wandb_writes_no_secret(planted, isolated_paths):
    done = run_py("logger=wandb", f"logger.dir={isolated_paths / 'wandb'}", *REFERENCES, timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]
    assert list((isolated_paths / "wandb").rglob("run-*.wandb")), "W&B recorded nothing"
    (manifest,) = _manifests(isolated_paths / "results")
    _check_manifest(manifest)
    assert _leaks(isolated_paths, planted, done.stdout, done.stderr) == []


@pytest.mark.slow
def test_submitit_sweep_writes_no_secret(planted, isolated_paths):
    done = run_py("-m", "eval.ks=[3],[5]", "hydra/launcher=submitit_local", "logger=wandb", *REFERENCES, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    (sweep_dir,) = (isolated_paths / "logs" / "multirun").glob("*/*")
    assert len(list(sweep_dir.glob("*/.hydra"))) == 2 and list(sweep_dir.glob(".submitit/*/*.pkl"))
    manifests = _manifests(isolated_paths / "results")
    assert manifests
    for manifest in manifests:
        _check_manifest(manifest)
    assert _leaks(isolated_paths, planted, done.stdout, done.stderr) == []

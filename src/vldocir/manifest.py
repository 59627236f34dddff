"""The run manifest: everything needed to trust a result and to make it again (STYLE.md #9).

What a run records about itself (package versions, git state, hardware) and the one redaction rule
that keeps secrets out of manifests, trackers, logs and the command line. It imports nothing else
from vldocir, so the pipeline, the launcher and the trackers can all use it.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

PACKAGES = (
    "vldocir",
    "numpy",
    "pandas",
    "pyarrow",
    "hydra-core",
    "omegaconf",
    "hydra-submitit-launcher",
    "submitit",
    "bm25s",
    "PyStemmer",
    "torch",
    "torchvision",
    "transformers",
    "colpali-engine",
    "accelerate",
    "wandb",
    "playwright",
    "pytesseract",
    "scikit-learn",
    "xgboost",
)
REDACTED = "<redacted: secrets come from the environment only>"

# --- the redaction rule -------------------------------------------------------------------------
# One rule for every place a secret could be written: manifests, W&B (config and command line),
# log records, and run.py's refusal of secret-looking command-line overrides (vldocir.launch).
#
# A key name is split into lower-case words (``aws_access_key_id`` -> aws/access/key/id,
# ``apiKey`` -> api/key, ``HF_TOKEN`` -> hf/token); it is secret-looking when
#   - a word *is* one of SECRET_WORDS (``hf_auth``, ``session_id``, ``creds``), or
#   - a word *ends with* one of SECRET_SUFFIXES (``my_token``, ``hftoken``, ``dbpassword``,
#     ``openaiapikey``, ``client_secret``, ``credentials``, ``cookie``), or
#   - the word ``key`` comes with other words (``api_key``, ``private_key``, ``aws_access_key_id``,
#     ``key_file``).
# Deliberately *not* secret-looking:
#   - ``key`` on its own: the manifest's ``run.key`` and ``cache[].key`` are content hashes that
#     make a result reproducible; ``keys`` (``exclude_keys``) is not a key either;
#   - plurals such as ``max_visual_tokens`` / ``page_block_tokens`` (counts, not tokens);
#   - ``tokenizer``, ``author(s)``: whole words, so no substring match;
#   - a tokenizer's special tokens (``pad_token``, ``eos_token_id``, ...): strings like "<pad>".
# The cost of the rule is over-redaction of a few harmless names (``sort_key``, ``token_budget``);
# a leaked secret costs more.
SECRET_WORDS = frozenset(
    {"auth", "oauth", "authorization", "bearer", "creds", "passphrase", "session", "sessionid", "secrets"}
)
SECRET_SUFFIXES = (
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "credential",
    "credentials",
    "cookie",
    "cookies",
)
SPECIAL_TOKENS = frozenset(
    {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "image", "video", "audio", "start", "end"}
)
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Environment variables that name where a secret is rather than hold it (SSH_AUTH_SOCK,
# HF_TOKEN_PATH, AWS_SHARED_CREDENTIALS_FILE): their values are ordinary paths.
_LOCATION_WORDS = frozenset({"file", "path", "dir", "sock", "socket"})
# Shorter environment values are not scrubbed from text: "1" or "true" would redact half a config.
MIN_SECRET_LENGTH = 8


def key_words(name: str) -> list[str]:
    """The lower-case words of a key name: split at non-alphanumerics, camelCase and digits."""
    return [w.lower() for w in _WORD.findall(str(name))]


def _is_secret_name(name: str) -> bool:
    words = key_words(name)
    if len(words) in (2, 3) and words[0] in SPECIAL_TOKENS and words[1] == "token" and words[2:] in ([], ["id"]):
        return False  # pad_token, eos_token_id: a tokenizer's special tokens
    if any(w in SECRET_WORDS or w.endswith(SECRET_SUFFIXES) for w in words):
        return True
    return "key" in words and len(words) > 1


def is_secret_key(name: Any) -> bool:
    """Whether a key name looks like a secret: a config key (``api_key``), an environment variable
    (``HF_TOKEN``) or a key path (``logger.api_key``, ``db@creds``), which does when any of its
    components does (``run.key`` does not: ``key`` alone is a content hash)."""
    return any(_is_secret_name(part) for part in re.split(r"[./@]", str(name)) if part)


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-looking environment variables (WANDB_API_KEY, HF_TOKEN, OPENAI_API_KEY,
    AWS_SECRET_ACCESS_KEY, ...), longest first, so that they can be scrubbed from anything written.

    A config can pull them in through ``${oc.env:...}`` under an innocent key; the key rule alone
    would let that through.
    """
    environ = os.environ if environ is None else environ
    values = {
        value
        for name, value in environ.items()
        if is_secret_key(name) and not _LOCATION_WORDS & set(key_words(name)) and len(value) >= MIN_SECRET_LENGTH
    }
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every environment secret value replaced (a log line, an override, a config value)."""
    for secret in environment_secrets() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_secrets(value: Any, secrets: list[str] | None = None) -> Any:
    """Copy of a config tree: any value under a secret-looking key replaced, and environment
    secret values scrubbed from every string."""
    secrets = environment_secrets() if secrets is None else secrets
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret_key(k) and v not in (None, "") else redact_secrets(v, secrets))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v, secrets) for v in value]
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


def override_key(override: str) -> str:
    """The key path of a command-line override: ``+aws.secret_key=x`` -> ``aws.secret_key``
    (the ``+``/``++``/``~`` prefix and the value dropped)."""
    return override.partition("=")[0].lstrip("~+").strip()


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (``key=value``) with the value of any secret-looking key replaced."""
    secrets = environment_secrets()
    redacted = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and value and is_secret_key(override_key(override)):
            redacted.append(f"{key}={REDACTED}")
        else:
            redacted.append(redact_text(override, secrets))
    return redacted


class RedactingFilter(logging.Filter):
    """Scrubs environment secret values from a log record's message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = environment_secrets()
        if not secrets:
            return True
        message = record.getMessage()
        redacted = redact_text(message, secrets)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, secrets)
        return True


def install_log_redaction() -> None:
    """Attach :class:`RedactingFilter` to the root logger's handlers (console, Hydra's job log file).

    Called when a job's tracker is created, i.e. after Hydra configured logging for the job, in
    local runs and in submitit's job processes alike. Filters on handlers (not on the root logger)
    also see records that propagate from module loggers.
    """
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(repo: Path) -> dict[str, Any]:
    """Commit and dirty flag of the code that ran (``None`` outside a git checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": [],
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
    }
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            info["gpus"] = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return info

"""The run manifest: everything needed to trust a result and to make it again (STYLE.md #9).

What a run records about itself (package versions, git state, hardware) and the one redaction rule
that keeps secrets out of manifests, trackers, logs and the command line. It imports nothing else
from vldocir, so the pipeline, the launcher and the trackers can all use it.
"""

from __future__ import annotations

import logging
import math
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
from urllib.parse import parse_qsl, unquote, urlsplit

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
# One rule for every place a secret could be written: manifests, Hydra's job files, W&B (config
# and command line), log records (httpx's included), store directory names, and the apps' refusal
# of secret-looking command-line overrides (vldocir.launch). A secret is recognised two ways.
#
# By its value (:func:`is_secret_value`), wherever it stands, in a config value, a log line or an
# override: a token of a known shape (SECRET_SHAPES: ``sk-...``, ``hf_...``, ``ghp_...``,
# ``xox.-...``, ``AKIA...``, a JWT, ``Bearer ...``), the value of an ``Authorization`` /
# ``api-key`` / ``x-api-key`` header or of an ``api_key=`` / ``password=`` pair written in text,
# the user-info of a URL (``http://user:pass@host``), or the value of a secret-named environment
# variable (:func:`environment_secrets`), however it got there (``${oc.env:...}``, a shell, a file).
#
# By where it goes (:func:`is_carrier_key`): every value of an HTTP header or URL query mapping
# (``params.extra_headers``, ``extra_query``, ``default_headers``, ...), whatever its key: a header
# ``X-Db-Pass`` or a query parameter ``key`` is a credential as often as not.
#
# By what the running job found (:func:`declare_secrets`, :func:`known_secrets`): when an app
# starts, the values its config sends as credentials (under a secret-looking or carrier key, a
# URL's user-info or query values; config files, ``conf/local/`` and ``${oc.env:...}`` alike) are
# held in memory and scrubbed from everything written from then on, as are environment values
# that look like tokens under any name (:func:`looks_like_a_token`: ``DB_PASS=9fQ...``).
#
# By its key name (:func:`is_secret_key`), for what has no telling shape (``api_key: abc123``).
# A key name is split into lower-case words (``aws_access_key_id`` -> aws/access/key/id,
# ``apiKey`` -> api/key, ``HF_TOKEN`` -> hf/token); it is secret-looking when
#   - a word *is* one of SECRET_WORDS (``hf_auth``, ``session_id``, ``creds``), or
#   - a word *ends with* one of SECRET_SUFFIXES (``my_token``, ``hftoken``, ``dbpassword``,
#     ``openaiapikey``, ``client_secret``, ``credentials``, ``cookie``), or
#   - the word ``key`` comes with other words (``api_key``, ``private_key``, ``aws_access_key_id``,
#     ``key_file``).
# Deliberately *not* secret-looking:
#   - the key of a content hash: ``key`` on its own (the manifest's ``run.key``, ``cache[].key``)
#     and ``<thing>_key`` for the things the project keys by content (CONTENT_KEY_WORDS:
#     ``store.run_key``, ``store.eval_key``): they make a result reproducible and findable;
#     ``keys`` (``exclude_keys``) is not a key either;
#   - plurals such as ``max_visual_tokens`` / ``page_block_tokens`` (counts, not tokens);
#   - ``tokenizer``, ``author(s)``: whole words, so no substring match;
#   - a tokenizer's special tokens (``pad_token``, ``eos_token_id``, ...): strings like "<pad>".
# The cost of the rule is over-redaction of a few harmless names (``sort_key``, ``token_budget``);
# a leaked secret costs more. No content hash has a token's shape (hex digits only).
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
CONTENT_KEY_WORDS = frozenset({"run", "eval", "cache", "content", "artifact", "entry", "input", "shard", "lease"})
SPECIAL_TOKENS = frozenset(
    {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "image", "video", "audio", "start", "end"}
)
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Environment variables that name where a secret is rather than hold it (SSH_AUTH_SOCK,
# HF_TOKEN_PATH, AWS_SHARED_CREDENTIALS_FILE): their values are ordinary paths.
_LOCATION_WORDS = frozenset({"file", "path", "dir", "sock", "socket"})
# Shorter environment values are not scrubbed from text: "1" or "true" would redact half a config.
MIN_SECRET_LENGTH = 8

# Each pattern's group "secret" is what is replaced (the whole match where it has none): the
# scheme word of a header, a URL's host, a pair's name stay readable.
_TOKEN_CHARS = r"[A-Za-z0-9._~+/=-]"
SECRET_SHAPES = tuple(
    re.compile(pattern)
    for pattern in (
        r"(?<![A-Za-z0-9])sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}",  # OpenAI / Anthropic / Stripe
        r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{16,}",  # Hugging Face
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",  # GitHub
        r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}",  # GitLab
        r"(?<![A-Za-z0-9])xox[abeoprs]-[A-Za-z0-9-]{10,}",  # Slack
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",  # AWS access key id
        r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}",  # Google API key
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
        rf"(?i)\bbearer\s+(?P<secret>{_TOKEN_CHARS}{{8,}})",
        # A header or a credential pair written out: 'Authorization': 'Basic ...', ?api_key=..., password: ...
        r"(?i)\b(?:proxy-authorization|authorization|x-api-key|api[-_]?key|access[-_]token|password|passwd)"
        r"""["']?\s*[:=]\s*["']?(?>(?:(?:bearer|basic|token|digest)\s+)?)(?!\$\{|<redacted)(?P<secret>[^\s"',;&{}\[\]]{4,})""",
        # The user-info of a URL: scheme://user:password@host, scheme://token@host
        r"(?i)\b[a-z][a-z0-9+.-]*://(?P<secret>[^/\s@:?#]*(?::[^/\s@?#]*)?)@",
    )
)


def key_words(name: str) -> list[str]:
    """The lower-case words of a key name: split at non-alphanumerics, camelCase and digits."""
    return [w.lower() for w in _WORD.findall(str(name))]


def _is_secret_name(name: str) -> bool:
    words = key_words(name)
    if len(words) in (2, 3) and words[0] in SPECIAL_TOKENS and words[1] == "token" and words[2:] in ([], ["id"]):
        return False  # pad_token, eos_token_id: a tokenizer's special tokens
    if len(words) == 2 and words[0] in CONTENT_KEY_WORDS and words[1] in ("key", "keys"):
        return False  # run_key, eval_key: content hashes
    if any(w in SECRET_WORDS or w.endswith(SECRET_SUFFIXES) for w in words):
        return True
    return "key" in words and len(words) > 1


def is_secret_key(name: Any) -> bool:
    """Whether a key name looks like a secret: a config key (``api_key``), an environment variable
    (``HF_TOKEN``) or a key path (``logger.api_key``, ``db@creds``), which does when any of its
    components does (``run.key``, ``store.run_key`` do not: content hashes)."""
    return any(_is_secret_name(part) for part in re.split(r"[./@]", str(name)) if part)


# Keys of a mapping whose values all go into HTTP headers or a URL's query (the last word of the key).
CARRIER_WORDS = frozenset({"headers", "header", "cookies"})
CARRIER_NAMES = frozenset({("extra", "query"), ("default", "query"), ("query", "params"), ("query", "parameters")})
# Environment variables whose values name a thing rather than hold a secret, however random they look
# (GITHUB_SHA, INVOCATION_ID, HF_HUB_REVISION): left to the name rule.
_IDENTIFIER_WORDS = _LOCATION_WORDS | {
    "sha",
    "commit",
    "revision",
    "rev",
    "ref",
    "version",
    "id",
    "uuid",
    "hash",
    "digest",
    "host",
    "hostname",
    "url",
    "uri",
}
MIN_TOKEN_LENGTH = 16  # an environment value shorter than this is never taken for a token by its shape
MIN_TOKEN_ENTROPY = 3.0  # bits per character of a value's own character distribution (hex: about 3.7)
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~+/=-]+")
# A value declared by the running job is scrubbed from text when at least this long ("1", "yes" are not).
MIN_DECLARED_LENGTH = 4
_declared: set[str] = set()


def is_carrier_key(name: Any) -> bool:
    """Whether a key names a mapping of HTTP headers or URL query parameters (``extra_headers``,
    ``default_headers``, ``extra_query``, ``query_params``): every value under it is a secret."""
    last = re.split(r"[./@]", str(name))[-1]
    words = key_words(last)
    return bool(words) and (words[-1] in CARRIER_WORDS or tuple(words) in CARRIER_NAMES)


def looks_like_a_token(value: str) -> bool:
    """Whether an environment value looks like a token or password whatever its variable's name:
    at least MIN_TOKEN_LENGTH token characters (letters, digits, ``._~+/=-``; no path, URL or list),
    letters and digits both, and random-looking (MIN_TOKEN_ENTROPY bits per character). A name made of
    separated parts one of which is a word (``vldocir-py311-cu121``, ``Qwen2-VL-2B-Instruct``,
    ``x86_64-conda-linux-gnu``, ``MIG-5f3c…``) is an identifier, not a token."""
    if len(value) < MIN_TOKEN_LENGTH or not _TOKEN_LIKE.fullmatch(value) or "//" in value:
        return False
    parts = re.split(r"[-_.]", value)
    if len(parts) > 1 and any(len(part) >= 3 and part.isalpha() for part in parts):
        return False
    if not (any(c.isalpha() for c in value) and any(c.isdigit() for c in value)):
        return False
    counts = [value.count(c) for c in set(value)]
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts)
    return entropy >= MIN_TOKEN_ENTROPY


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-looking environment variables (WANDB_API_KEY, HF_TOKEN, OPENAI_API_KEY,
    AWS_SECRET_ACCESS_KEY, ...) and token-like values under any other name (``DB_PASS``; see
    :func:`looks_like_a_token`), longest first, so that they can be scrubbed from anything written.

    A config can pull them in through ``${oc.env:...}`` under an innocent key; the key rule alone
    would let that through.
    """
    environ = os.environ if environ is None else environ
    values = set()
    for name, value in environ.items():
        words = set(key_words(name))
        by_name = is_secret_key(name) and not _LOCATION_WORDS & words and len(value) >= MIN_SECRET_LENGTH
        if by_name or (not _IDENTIFIER_WORDS & words and looks_like_a_token(value)):
            values.add(value)
    return sorted(values, key=len, reverse=True)


def declare_secrets(values: Any) -> None:
    """Hold ``values`` (strings) in memory as secrets of this process: from now on every sink that
    uses the rule (logs, manifests, Hydra's files, W&B, caches) scrubs them. Never written anywhere."""
    _declared.update(v for v in (str(x) for x in values) if len(v) >= MIN_DECLARED_LENGTH)


def known_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret known by value: the environment's (:func:`environment_secrets`) and those the
    running job declared (:func:`declare_secrets`), longest first."""
    return sorted(set(environment_secrets(environ)) | _declared, key=len, reverse=True)


def _spans(text: str, secrets: list[str]) -> list[tuple[int, int]]:
    """The character spans of ``text`` that hold a secret (by value), merged, in order."""
    spans = []
    for secret in secrets:
        start = text.find(secret)
        while start >= 0:
            spans.append((start, start + len(secret)))
            start = text.find(secret, start + len(secret))
    for pattern in SECRET_SHAPES:
        for match in pattern.finditer(text):
            group = "secret" if "secret" in pattern.groupindex else 0
            if match.group(group):
                spans.append(match.span(group))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def is_secret_value(text: Any, secrets: list[str] | None = None) -> bool:
    """Whether ``text`` holds a secret by value: a known token shape, a header or credential pair,
    URL user-info, or a secret environment variable's value (see the rule above)."""
    return isinstance(text, str) and bool(_spans(text, known_secrets() if secrets is None else secrets))


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` (a log line, an override, a config value) with every secret found by value replaced."""
    spans = _spans(text, known_secrets() if secrets is None else secrets)
    for start, end in reversed(spans):
        text = text[:start] + REDACTED + text[end:]
    return text


def redact_secrets(
    value: Any, secrets: list[str] | None = None, keep_references: bool = False, _carried: bool = False
) -> Any:
    """Copy of a config tree: any value under a secret-looking key replaced, every value of a
    header or query mapping (:func:`is_carrier_key`) too, and secrets found by value scrubbed from
    every string (keys included). ``keep_references``: an unresolved tree (Hydra's
    ``.hydra/config.yaml``) keeps a bare ``${oc.env:VAR}`` there: it names where the secret is, not
    the secret."""
    secrets = known_secrets() if secrets is None else secrets

    def reference(v: Any) -> bool:
        return keep_references and isinstance(v, str) and bool(ENV_REFERENCE.match(v))

    def hidden(key: Any, v: Any) -> bool:
        if v in (None, "") or not is_secret_key(key):
            return False
        return not reference(v)

    if isinstance(value, dict):
        return {
            redact_text(k, secrets) if isinstance(k, str) else k: (
                REDACTED if hidden(k, v) else redact_secrets(v, secrets, keep_references, _carried or is_carrier_key(k))
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v, secrets, keep_references, _carried) for v in value]
    if _carried and value not in (None, "") and not reference(value):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value, secrets)
    return value


def config_secrets(tree: Any) -> list[str]:
    """The values a resolved config tree sends as credentials: under a secret-looking key or a
    header/query mapping (every leaf), a URL's user-info and query values, token shapes; the values
    :func:`declare_secrets` takes when an app starts."""
    found: list[str] = []

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, secret or is_secret_key(k) or is_carrier_key(k))
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, secret)
        elif value is not None and value != "" and "${" not in str(value):  # a reference is no value (yet)
            text = str(value)
            if secret:
                found.append(text)
            found.extend(url_secrets(text))
            found.extend(text[start:end] for start, end in _spans(text, []))

    walk(tree, False)
    return found


_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+")
_NEXT_URL = re.compile(r"(?i),(?=[a-z][a-z0-9+.-]*://)")  # a comma-separated list of URLs (VLDOCIR_LLM_BASE_URL)


def url_secrets(text: str) -> list[str]:
    """The user-info (user and password) and the query values of every URL in ``text`` (each URL of
    a comma-separated list too)."""
    found = []
    for url in (u for match in _URL.finditer(text) for u in _NEXT_URL.split(match.group(0))):
        try:
            parts = urlsplit(url)
            found += [unquote(p) for p in (parts.username, parts.password) if p]
            found += [v for _, v in parse_qsl(parts.query) if v]
        except ValueError:  # not a URL after all (a bad port, a bracket)
            continue
    return found


def override_key(override: str) -> str:
    """The key path of a command-line override: ``+aws.secret_key=x`` -> ``aws.secret_key``
    (the ``+``/``++``/``~`` prefix and the value dropped)."""
    return override.partition("=")[0].lstrip("~+").strip()


# A ``name: value`` pair inside an override's dict value (``{Authorization: 'Bearer x', n: 1}``).
_INLINE_PAIR = re.compile(r"""(?P<name>[A-Za-z_][\w-]*)\s*:\s*(?P<value>'[^']*'|"[^"]*"|\$\{[^{}]*\}|[^,{}\[\]]+)""")
# Exactly one ${oc.env:NAME}, no default (a default would be a literal), optionally quoted.
ENV_REFERENCE = re.compile(r"""^(['"]?)\$\{oc\.env:[A-Za-z_][A-Za-z0-9_]*\}\1$""")


def inline_secret_names(value: str, literals_only: bool = True) -> list[str]:
    """The secret-looking names inside an override's dict value given a literal value:
    ``{api_key: abc}`` -> ``["api_key"]``; a reference (``{api_key: '${oc.env:KEY}'}``) is no
    literal. ``literals_only=False``: given any value."""
    if not value.lstrip().startswith(("{", "[")):
        return []
    return [
        m["name"]
        for m in _INLINE_PAIR.finditer(value)
        if is_secret_key(m["name"])
        and m["value"].strip()
        and not (literals_only and ENV_REFERENCE.match(m["value"].strip()))
    ]


def carries_a_literal(override: str) -> bool:
    """Whether an override gives a header or query mapping (:func:`is_carrier_key`) a literal value:
    ``...extra_headers.X-Db-Pass=x``, ``...extra_query={key: x}``; a reference (``${oc.env:VAR}``,
    also as each value of a dict) is none."""
    key, _, value = override.partition("=")
    value = value.strip()
    if not value or not any(is_carrier_key(part) for part in re.split(r"[./@]", override_key(key)) if part):
        return False
    if ENV_REFERENCE.match(value) or value in ("null", "~", "{}", "[]"):  # a reference, or clearing the mapping
        return False
    if value.startswith("{"):
        return any(not ENV_REFERENCE.match(m["value"].strip()) for m in _INLINE_PAIR.finditer(value))
    return True


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (``key=value``) with the value of any secret-looking key replaced,
    secret-named pairs of a dict value too, a header or query value, and secrets found by value scrubbed."""
    secrets = known_secrets()
    redacted = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and (
            (value and is_secret_key(override_key(override)))
            or inline_secret_names(value)
            or carries_a_literal(override)
        ):
            redacted.append(f"{key}={REDACTED}")
        else:
            redacted.append(redact_text(override, secrets))
    return redacted


class RedactingFilter(logging.Filter):
    """Scrubs secrets (found by value) from a log record's message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = known_secrets()
        message = record.getMessage()
        redacted = redact_text(message, secrets)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, secrets)
        return True


# Libraries that log request URLs (where user-info would show): filtered at the source too, so a
# handler attached to them directly is covered as well as the root logger's.
URL_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "urllib3")


def install_log_redaction() -> None:
    """Attach :class:`RedactingFilter` to the root logger's handlers (console, Hydra's job log file)
    and to the loggers of the HTTP libraries (URL_LOGGERS).

    Called when a job starts, i.e. after Hydra configured logging for the job, in local runs and in
    submitit's job processes alike (:func:`vldocir.apps.app.hydra_app`). Filters on handlers (not on
    the root logger) also see records that propagate from module loggers.
    """
    targets = [*logging.getLogger().handlers, *(logging.getLogger(name) for name in URL_LOGGERS)]
    for target in targets:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(RedactingFilter())


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

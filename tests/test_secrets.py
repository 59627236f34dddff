"""Secrets: one redaction rule by key and by value (vldocir/manifest.py), the apps' refusal of
secret-looking overrides (launch.py), and end to end, that no secret is written anywhere.

The end-to-end tests plant unique values (fake tokens of the real shapes) in the environment, in a
config file and in the LLM client's parameters, run `python run.py` as a subprocess (a sweep with
Query splitting against a local chat server, mirrored to W&B offline; a submitit sweep), then read
every file under the test's temp dir (results, cache and its LLM answers, Hydra's run and sweep
dirs, W&B, submitit pickles) as bytes: none may hold a planted value. They grep everything rather
than known paths on purpose: the layouts of the results store and of W&B's run directory change,
and a leak lands where nobody looks.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from helpers import REPO_ROOT, compose_cfg, run_py
from vldocir import store
from vldocir.launch import SECRET_ENV_PREFIX, refuse_secret_overrides, secret_overrides, secrets_to_environment
from vldocir.llm_server import ChatServer, Recorded, Reply
from vldocir.manifest import (
    REDACTED,
    RedactingFilter,
    config_secrets,
    declare_secrets,
    environment_secrets,
    install_log_redaction,
    is_carrier_key,
    is_secret_key,
    is_secret_value,
    known_secrets,
    looks_like_a_token,
    override_key,
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


def _hex(n: int = 32) -> str:
    return (uuid.uuid4().hex * 2)[:n]


# Fake tokens of the real shapes, each unique to its test (made at run time: the file holds no token shape).
FAKE_HF, FAKE_OPENAI = "hf" + "_0123456789", "sk" + "-0123456789"
FAKE_PASSWORD, FAKE_BEARER = "pw" + "0123456789", "Bearer " + "opaque" + "0123456789"


def _shaped() -> dict[str, str]:
    h = _hex()
    return {
        "openai": "sk" + f"-proj-{h}",
        "hf": "hf" + f"_{h}",
        "github": "ghp" + f"_{h}",
        "slack": "xox" + f"b-1234567890-{h[:12]}",
        "aws": "AKIA" + h[:16].upper(),
        "jwt": "eyJ" + f"hbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{h[:10]}In0.{h[:22]}",
    }


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


def test_no_config_value_of_the_project_looks_like_a_secret():
    """The value rule must not refuse (or redact) anything the project's configs set."""
    values = []
    for path in (REPO_ROOT / "conf").rglob("*.yaml"):
        values += re.findall(r"^\s*[\w-]+:\s*([^#\n]+)", path.read_text(), re.M)
    assert len(values) > 100 and "Qwen/Qwen3-VL-32B-Instruct" in {v.strip() for v in values}  # the scan works
    assert [v for v in values if is_secret_value(v, [])] == []


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
        "run_key",
        "store.run_key",
        "store.eval_key",
        "inputs.run_key",
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
        "HF_TOKEN": FAKE_HF,
        "OPENAI_API_KEY": FAKE_OPENAI,
        "PATH": "/usr/bin:/bin",
        "XDG_SESSION_ID": "3",  # too short to scrub from text
        "SSH_AUTH_SOCK": "/tmp/ssh-abc/agent.1",
        "HF_TOKEN_PATH": "/home/u/.cache/hf/token",  # locations, not secrets
    }
    assert sorted(environment_secrets(environ)) == [FAKE_HF, FAKE_OPENAI]


def test_token_like_environment_values_are_secrets_under_any_name():
    """Issue #35: ``DB_PASS`` is no secret-looking name, its value looks like a token; values that
    name things (paths, lists, versions, a commit, an id) or are too short or too regular are not."""
    token = "9fQz" + _hex(28)
    environ = {
        "DB_PASS": token,
        "PATH": "/usr/local/bin:/usr/bin",
        "HOME": "/home/someone",
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
        "PYTHON_VERSION": "3.11.7",
        "GITHUB_SHA": _hex(40),  # a commit names a thing
        "INVOCATION_ID": _hex(32),
        "REGULAR": "aaaaaaaa11111111",  # long, letters and digits, but no token
        "CONDA_DEFAULT_ENV": "vldocir-py311-cu121",  # names made of parts, one a word: identifiers
        "MODEL_ID_HINT": "Qwen2-VL-2B-Instruct",
        "CUDA_VISIBLE_DEVICES": "MIG-5f3c2a1b-9d4e-4c7a-8b1f-2e6d9a0c7b35",
        "VLDOCIR_LLM_BASE_URL": "http://127.0.0.1:8000/v1",
        "COLUMNS": "120",
    }
    assert environment_secrets(environ) == [token]
    assert looks_like_a_token(token) and not looks_like_a_token("Summer2024")  # short: no shape to tell


@pytest.mark.parametrize(
    "name",
    [
        "extra_headers",
        "default_headers",
        "headers",
        "extra_query",
        "default_query",
        "query_params",
        "setting.method.llm.params.extra_headers",
        "cookies",
    ],
)
def test_header_and_query_mappings_are_carriers(name):
    assert is_carrier_key(name)


@pytest.mark.parametrize("name", ["query", "queries", "query_batch_size", "query_id", "headers_count", "params"])
def test_other_keys_are_no_carriers(name):
    assert not is_carrier_key(name)


def test_no_config_key_of_the_project_is_a_carrier():
    assert sorted(n for n in _conf_key_names() if is_carrier_key(n)) == []


def test_every_header_and_query_value_is_redacted_and_declared():
    """A header or query value under a name no rule knows is redacted where it stands (references
    kept in Hydra's unresolved files) and found by :func:`config_secrets`, as are a URL's
    user-info and query values under any key."""
    header, query, password, url_query = (_secret() for _ in range(4))
    tree = {
        "llm": {
            "base_url": f"http://me:{password}@host:8000/v1?token_id={url_query}",
            "params": {
                "extra_headers": {"X-Db-Pass": header, "X-Ref": "${oc.env:DB_PASS}"},
                "extra_query": {"zugang": query, "n": 3},
                "top_p": 0.9,
            },
        },
        "depth": 5,
    }
    redacted = redact_secrets(tree, secrets=[], keep_references=True)
    params = redacted["llm"]["params"]
    assert params["extra_headers"] == {"X-Db-Pass": REDACTED, "X-Ref": "${oc.env:DB_PASS}"}
    assert params["extra_query"] == {"zugang": REDACTED, "n": REDACTED} and params["top_p"] == 0.9
    assert redacted["depth"] == 5 and password not in json.dumps(redacted)
    assert redact_secrets(tree, secrets=[])["llm"]["params"]["extra_headers"]["X-Ref"] == REDACTED
    found = config_secrets(tree)
    assert {header, query, password, url_query, "me"} <= set(found)
    assert "0.9" not in found and "5" not in found


def test_a_declared_secret_is_scrubbed_from_every_sink():
    value = _secret()
    assert redact_text(f"GET /v1?zugang={value}") == f"GET /v1?zugang={value}"
    declare_secrets([value, "on"])  # too short to scrub from text: "on" is kept
    assert value in known_secrets() and "on" not in known_secrets()
    assert redact_text(f"GET /v1?zugang={value} on") == f"GET /v1?zugang={REDACTED} on"
    assert redact_secrets({"note": f"x {value}"}) == {"note": f"x {REDACTED}"}
    record = logging.LogRecord("httpx", logging.INFO, __file__, 1, "HTTP Request: %s", (value,), None)
    assert RedactingFilter().filter(record) and value not in record.getMessage()


@pytest.fixture
def secret_env_cleanup():
    yield
    for name in [n for n in os.environ if n.startswith(SECRET_ENV_PREFIX)]:
        del os.environ[name]


def test_a_configs_secrets_move_to_the_environment(monkeypatch, secret_env_cleanup):
    """What a submitit job pickles of its config (the sweep config, Hydra's job return) holds
    references only; each resolves to the same value, from this process's environment."""
    from omegaconf import OmegaConf, open_dict

    header, query, token, number = _secret(), _secret(), "9fQz" + _hex(28), 48151623
    monkeypatch.setenv("DB_PASS", token)
    cfg = OmegaConf.create(
        {
            "llm": {
                "params": {
                    "extra_headers": {"X-Zugang": header, "X-Db-Pass": "${oc.env:DB_PASS}"},
                    "extra_query": {"zugang": query},
                },
                "note": f"pinned {token}",  # a token-like environment value, copied into a file
                "model": "Qwen/Qwen3-VL-32B-Instruct",
            },
            "db": {"session_id": number},
            "hydra": {"launcher": {"x": header}},  # Hydra's own node is left alone
        }
    )
    OmegaConf.set_struct(cfg, True)
    before = OmegaConf.to_container(cfg, resolve=True)
    moved = secrets_to_environment(cfg)
    assert sorted(moved) == [
        "db.session_id",
        "llm.note",
        "llm.params.extra_headers.X-Zugang",
        "llm.params.extra_query.zugang",
    ]
    assert OmegaConf.to_container(cfg, resolve=True) == before, "each reference resolves to the same value"
    with open_dict(cfg):
        del cfg["hydra"]  # as Hydra hands a job its config
    unresolved, pickled = OmegaConf.to_yaml(cfg), pickle.dumps(cfg)
    for value in (header, query, token, str(number)):
        assert value not in unresolved and value.encode() not in pickled
    assert cfg.llm.params.extra_headers._get_node("X-Db-Pass")._value() == "${oc.env:DB_PASS}"
    assert SECRET_ENV_PREFIX in OmegaConf.to_yaml(cfg.llm)
    assert redact_text(f"{header} {query}") == f"{REDACTED} {REDACTED}", "declared to the rule"


@pytest.mark.parametrize(
    "override",
    [
        "++setting.method.llm.params.extra_headers.X-Db-Pass=opaque",
        "+setting.method.llm.params.extra_query={zugang: opaque}",
        "+setting.method.llm.params.extra_query={zugang: '${oc.env:Z}', n: 1}",
    ],
)
def test_a_literal_header_or_query_value_on_the_command_line_is_refused(override):
    assert secret_overrides(["run.py", override]) == [override_key(override)]
    assert redact_overrides([override]) == [f"{override.partition('=')[0]}={REDACTED}"]


def test_a_header_or_query_reference_on_the_command_line_passes():
    argv = [
        "run.py",
        "++setting.method.llm.params.extra_headers.X-Db-Pass=${oc.env:DB_PASS}",
        "+setting.method.llm.params.extra_query={zugang: '${oc.env:Z}'}",
    ]
    assert secret_overrides(argv) == []


@pytest.mark.parametrize("kind", list(_shaped()))
def test_value_rule_finds_known_token_shapes(kind):
    token = _shaped()[kind]
    assert is_secret_value(token, []) and is_secret_value(f"note: {token}.", [])
    assert redact_text(f"note: {token}.", []) == f"note: {REDACTED}."


@pytest.mark.parametrize(  # credentials assembled at run time: the tracked file holds no credential shape
    ("text", "kept"),
    [
        ("http://llmuser:" + "pw-0123456789" + "@10.0.0.5:8000/v1/chat/completions", ["http://", "@10.0.0.5:8000/v1"]),
        ("https://" + "ghtoken0123456789" + "@github.com/org/repo", ["https://", "@github.com/org/repo"]),
        ("Bearer " + "abcdefgh" + "01234567", ["Bearer "]),
        ("{'Authorization': 'Basic " + "dXNlcjpw" + "YXNzd29yZA==" + "'}", ["{'Authorization': 'Basic ", "'}"]),
        ('"x-api-key": "' + "01234567" + "89abcdef" + '"', ['"x-api-key": "', '"']),
        ("GET /v1/models?api_key=" + "abcdef" + "0123&n=2", ["?api_key=", "&n=2"]),
    ],
)
def test_value_rule_finds_headers_credential_pairs_and_url_userinfo(text, kept):
    redacted = redact_text(text, [])
    assert is_secret_value(text, []) and REDACTED in redacted
    assert all(part in redacted for part in kept), "the host, the header's name and scheme stay readable"
    assert redact_text(redacted, []) == redacted, "redacting twice changes nothing"


@pytest.mark.parametrize(
    "text",
    [
        "3f93543a981a65f9",  # a run key
        "c969ba0398f6d6519f46b0c0a3d6e1f2a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4",  # a SHA-256
        "a859c70445883330f0e1d2c3b4a5968778695a4b",  # a git sha
        "http://127.0.0.1:8000/v1",
        "hf://vidore/docvqa_test_subsampled",
        "Qwen/Qwen3-VL-32B-Instruct",
        "max_tokens=512",
        "ta" + "sk" + "-0123456789abcdef0123",  # a word holding a token prefix
        "password: ${oc.env:DB_PASSWORD}",  # a reference names where the secret is
        "the bearer of the results",
        REDACTED,
    ],
)
def test_value_rule_keeps_ordinary_values(text):
    assert not is_secret_value(text, []) and redact_text(text, []) == text


def test_redaction_of_a_config_tree_by_key_and_by_value():
    shaped = _shaped()
    config = {
        "store": {"run_key": "3f93543a981a65f9", "eval_key": "ec134c682972dd84"},
        "run": {"key": "3f93543a981a65f9"},
        "llm": {
            "base_url": f"http://llmuser:{FAKE_PASSWORD}@127.0.0.1:8000/v1",
            "params": {"extra_headers": {"Authorization": FAKE_BEARER, "x-api-key": "opaque"}},
        },
        "retriever": {"note": shaped["hf"], "tags": ["a", shaped["github"]]},
    }
    redacted = redact_secrets(config, [])
    assert redacted["store"] == config["store"] and redacted["run"] == config["run"], "content hashes stay"
    assert redacted["llm"]["base_url"] == f"http://{REDACTED}@127.0.0.1:8000/v1"
    assert redacted["llm"]["params"]["extra_headers"] == {"Authorization": REDACTED, "x-api-key": REDACTED}
    assert redacted["retriever"] == {"note": REDACTED, "tags": ["a", REDACTED]}
    reference = {"hub_token": "${oc.env:HF_TOKEN}"}
    assert redact_secrets(reference, [], keep_references=True) == reference, "an unresolved tree keeps references"
    assert redact_secrets(reference, []) == {"hub_token": REDACTED}


def test_overrides_are_redacted_by_value_and_inside_dict_values():
    shaped = _shaped()
    assert redact_overrides(
        [
            f"+retriever.note={shaped['hf']}",
            "+llm.params.extra_headers={Authorization:'opaque0123'}",
            "+llm.params.extra_headers={Authorization:'${oc.env:AUTH}'}",
            "eval.ks=[3,5]",
        ]
    ) == [
        f"+retriever.note={REDACTED}",
        f"+llm.params.extra_headers={REDACTED}",
        "+llm.params.extra_headers={Authorization:'${oc.env:AUTH}'}",
        "eval.ks=[3,5]",
    ]


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


def test_http_client_log_lines_lose_url_credentials():
    """httpx (and httpx2, which openai uses) logs every request's URL at INFO: user-info included."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)  # attached to the library's logger itself, not to the root
    logger = logging.getLogger("httpx2")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        install_log_redaction()
        logger.info('HTTP Request: POST %s "HTTP/1.1 200 OK"', f"http://llmuser:{FAKE_PASSWORD}@127.0.0.1:9/v1/chat")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.filters = [f for f in logger.filters if not isinstance(f, RedactingFilter)]
    assert out.getvalue() == f'HTTP Request: POST http://{REDACTED}@127.0.0.1:9/v1/chat "HTTP/1.1 200 OK"\n'


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


HEADERS = "setting.method.llm.params.extra_headers"


def _by_value() -> list[tuple[str, str]]:
    shaped = _shaped()
    return [
        (f"+retriever.note={shaped['hf']}", "retriever.note"),
        (f"+x.y={shaped['openai']}", "x.y"),
        (f"retriever.id={shaped['aws']}", "retriever.id"),
        (f"+jwt={shaped['jwt']}", "jwt"),
        (f"setting.method.llm.base_url=http://llmuser:{FAKE_PASSWORD}@host:8000/v1", "setting.method.llm.base_url"),
        (f"+{HEADERS}={{Authorization:'{FAKE_BEARER}'}}", HEADERS),
        (f"+{HEADERS}={{x-api-key:opaque}}", HEADERS),
        ("setting.method.llm.params={api_key:opaque}", "setting.method.llm.params"),
        (f"+note={FAKE_BEARER}", "note"),
    ]


@pytest.mark.parametrize("index", range(len(_by_value())))
def test_secret_value_is_refused_under_any_key(index):
    override, named = _by_value()[index]
    message = _refusal(["run.py", "setting=qsplit", override])
    assert message.count("\n") == 1 and f"'{named}'" in message
    assert override.partition("=")[2] not in message and "opaque" not in message and "pw0123" not in message


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
        ["run.py", "+setting.method.llm.params.extra_headers={Authorization:'${oc.env:LLM_HEADER}'}"],
        ["run.py", "++setting.method.llm.params.extra_headers.Authorization=${oc.env:LLM_HEADER}"],
        ["run.py", "setting.method.llm.base_url=http://127.0.0.1:8000/v1", "+store.run_key=3f93543a981a65f9"],
        ["run.py", "dataset.source=hf://vidore/docvqa_test_subsampled", "+x={n: 1, name: abc}"],
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


def test_a_secret_cannot_name_a_store_directory():
    token = _shaped()["openai"]
    with pytest.raises(store.StoreError) as error:
        store.check_name("retriever id", token)
    assert "retriever id" in str(error.value) and "secret" in str(error.value) and token not in str(error.value)


def test_a_secret_retriever_id_is_refused_before_any_work(isolated_paths, monkeypatch):
    """``retriever.id='${oc.env:OPENAI_API_KEY}'`` passes the command-line guard (a reference) but
    would name store directories: the job refuses it before opening the benchmark or a tracker."""
    from helpers import evaluate

    value = _secret()
    monkeypatch.setenv("OPENAI_API_KEY", value)
    with pytest.raises(store.StoreError) as error:
        evaluate("retriever.id=${oc.env:OPENAI_API_KEY}")
    assert "retriever id" in str(error.value) and value not in str(error.value)
    assert list(isolated_paths.iterdir()) == [], "nothing is written"


def test_hydra_job_files_are_redacted_in_place(isolated_paths, tmp_path):
    """A secret from a config file reaches ``.hydra/config.yaml`` (no command-line guard sees it):
    the app rewrites the file redacted, keeping references, and leaves files without one as written."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, read_write

    from vldocir.apps.app import redact_hydra_files

    token = _shaped()["github"]
    job_dir = tmp_path / "job"
    (job_dir / ".hydra").mkdir(parents=True)
    config = job_dir / ".hydra" / "config.yaml"
    config.write_text(
        f"retriever:\n  remark: {token}\n  hub_token: ${{oc.env:HF_TOKEN}}\n  api_key: opaque\ndepth: 5\n"
    )
    overrides = job_dir / ".hydra" / "overrides.yaml"
    overrides.write_text("- depth=5\n")
    before = overrides.read_bytes()
    cfg = compose_cfg(keep_hydra=True)
    with read_write(cfg.hydra):  # Hydra's runtime node is read-only
        cfg.hydra.runtime.output_dir = str(job_dir)
    HydraConfig.instance().set_config(cfg)
    try:
        assert redact_hydra_files() == [config]
    finally:
        HydraConfig.instance().cfg = None  # no other test may take this directory for its job's
    assert OmegaConf.to_container(OmegaConf.load(config)) == {
        "retriever": {"remark": REDACTED, "hub_token": "${oc.env:HF_TOKEN}", "api_key": REDACTED},
        "depth": 5,
    }
    assert overrides.read_bytes() == before


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
    """``VAR in path`` for every file under ``root`` (read as bytes) holding a planted value, and
    every file or directory name that does."""
    found = []
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        found += [f"{var} in the name {name}" for var, value in secrets.items() if value in name]
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


def _split_in_halves(request: Recorded) -> Reply:
    """A Q-Split answer: the question's two halves."""
    words = re.search(r"Question:\n(.*?)\n\n", request.text(), re.S).group(1).rstrip("?.").split()
    return Reply(json.dumps([" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]))


@pytest.mark.slow
def test_secret_paths_are_written_nowhere(planted, isolated_paths, subset_dir, tmp_path_factory, monkeypatch):
    """Issue #22's five paths and planted values under innocent keys, through a 2-job sweep (basic
    launcher) of Query splitting against a local chat server, mirrored to W&B offline, then a job
    with a secret as its retriever id: every header and key is sent, and no file or directory name
    under the temp dir (results, cache with the LLM answers, Hydra's run and sweep dirs, W&B) or
    console line holds one; W&B shows the run key."""
    shaped = _shaped()
    values = {
        "Authorization header": shaped["openai"],  # in params.extra_headers, from the environment
        "URL password": f"pw{_hex(24)}",  # base_url's user-info, from $VLDOCIR_LLM_BASE_URL
        "params api_key": f"bodykey{_hex(24)}",  # params.extra_body.api_key: no shape, found by its key
        "innocent key, by reference": shaped["hf"],
        "innocent key, config file": shaped["github"],
        "x-api-key, config file": f"xak{_hex(24)}",
    }
    planted = {**planted, **values}
    monkeypatch.setenv("AUTHV", f"Bearer {values['Authorization header']}")
    monkeypatch.setenv("BODYV", values["params api_key"])
    monkeypatch.setenv("NOTEV", values["innocent key, by reference"])
    wandb_dir = isolated_paths / "wandb"
    config_dir = tmp_path_factory.mktemp("conf")  # outside the grepped dir: it holds literals on purpose
    (config_dir / "local").mkdir()
    (config_dir / "local" / "default.yaml").write_text(  # what need not be on the command line (names a job dir)
        "# @package _global_\n"
        f"dataset:\n  source: {subset_dir}\n"
        f"logger:\n  dir: {wandb_dir}\n"
        f"retriever:\n  remark: {values['innocent key, config file']}\n"
        "setting:\n  method:\n    llm:\n      timeout_s: 20\n      params:\n        extra_headers:\n"
        f"          x-api-key: {values['x-api-key, config file']}\n"
    )
    common = ["--config-dir", str(config_dir), "-m", "setting=qsplit", "logger=wandb"]  # flags first
    with ChatServer(responder=_split_in_halves) as server:
        monkeypatch.setenv("VLDOCIR_LLM_BASE_URL", server.url.replace("://", f"://llmuser:{values['URL password']}@"))
        sweep = run_py(
            *common,
            "eval.ks=[3],[5]",
            f"++{HEADERS}.Authorization=${{oc.env:AUTHV}}",
            "+setting.method.llm.params.extra_body={api_key:${oc.env:BODYV}}",
            "+retriever.comment=${oc.env:NOTEV}",
            timeout=600,
        )
        assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-5000:]
        refused = run_py(*common, "retriever.id=${oc.env:OPENAI_API_KEY}", timeout=300)
    assert refused.returncode == 2 and "retriever id" in refused.stderr and "secret" in refused.stderr

    assert server.requests, "the LLM was asked"
    for request in server.requests:  # what is redacted everywhere is still sent
        assert request.headers["authorization"] == f"Bearer {values['Authorization header']}"
        assert request.headers["x-api-key"] == values["x-api-key, config file"]
        assert request.body["api_key"] == values["params api_key"]
    assert list((isolated_paths / "cache" / "llm").rglob("*.json")), "answers were cached"
    sweep_dirs = sorted((isolated_paths / "logs" / "multirun").glob("*/*"))
    assert len(sweep_dirs) == 2 and all((d / "multirun.yaml").is_file() for d in sweep_dirs)
    assert len(list(sweep_dirs[0].glob("*/.hydra/config.yaml"))) == 2
    manifests = _manifests(isolated_paths / "results")
    assert len(manifests) == 2
    for manifest in manifests:
        assert re.fullmatch(r"[0-9a-f]{16}", manifest["store"]["run_key"]), manifest["store"]
        config = manifest["config"]
        assert config["retriever"]["comment"] == REDACTED and config["retriever"]["remark"] == REDACTED
        llm = config["setting"]["method"]["llm"]
        assert llm["base_url"] == f"http://{REDACTED}@127.0.0.1:{server.port}/v1"
        assert llm["params"]["extra_headers"] == {"x-api-key": REDACTED, "Authorization": REDACTED}
        assert llm["params"]["extra_body"] == {"api_key": REDACTED}
    # W&B's offline transaction log holds each run's config as JSON values: the run key is visible there.
    wandb_logs = b"".join(path.read_bytes() for path in wandb_dir.rglob("run-*.wandb"))
    for manifest in manifests:
        assert f'"run_key":"{manifest["store"]["run_key"]}"'.encode() in wandb_logs
    assert _leaks(isolated_paths, planted, sweep.stdout, sweep.stderr, refused.stdout, refused.stderr) == []


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


def _token() -> str:
    """A token-like value (letters and digits, random) under no telling shape or name."""
    return "Zq" + uuid.uuid4().hex + uuid.uuid4().hex.upper()[:8]


@pytest.mark.slow
def test_config_secrets_under_new_names_are_written_nowhere_by_a_submitit_sweep(
    planted, isolated_paths, subset_dir, tmp_path_factory, monkeypatch
):
    """Issue #35's acceptance: values under key names no rule knows, in a config file (a setting of
    its own) and in a ``local/`` override, sent as LLM headers, a URL query parameter and through
    an environment interpolation of an innocently named variable, through a submitit sweep
    (``hydra/launcher=submitit_local``) of Query splitting against a local chat server, mirrored to
    W&B offline: every value is sent, and no file under the temp dir (results, cache and its LLM
    answers, Hydra's sweep and job dirs, ``.submitit`` pickles and job logs, ``wandb/``) nor the
    console holds one."""
    values = {
        "header, config file": _token(),  # setting/qsplit_keyed.yaml: extra_headers.X-Zugang
        "query parameter, local override": _token(),  # local/default.yaml: extra_query.zugang
        "header, env interpolation": _token(),  # local/default.yaml: extra_headers.X-Db-Pass: ${oc.env:DB_PASS}
    }
    monkeypatch.setenv("DB_PASS", values["header, env interpolation"])
    wandb_dir = isolated_paths / "wandb"
    config_dir = tmp_path_factory.mktemp("conf")  # outside the grepped dir: it holds the literals on purpose
    (config_dir / "setting").mkdir()
    (config_dir / "setting" / "qsplit_keyed.yaml").write_text(
        "defaults:\n  - qsplit\n  - _self_\n"
        f"method:\n  llm:\n    params:\n      extra_headers:\n        X-Zugang: {values['header, config file']}\n"
    )
    (config_dir / "local").mkdir()
    (config_dir / "local" / "default.yaml").write_text(
        "# @package _global_\n"
        f"dataset:\n  source: {subset_dir}\n"
        f"logger:\n  dir: {wandb_dir}\n"
        "setting:\n  method:\n    llm:\n      timeout_s: 20\n      params:\n"
        f"        extra_query:\n          zugang: {values['query parameter, local override']}\n"
        "        extra_headers:\n          X-Db-Pass: ${oc.env:DB_PASS}\n"
    )
    with ChatServer(responder=_split_in_halves) as server:
        monkeypatch.setenv("VLDOCIR_LLM_BASE_URL", server.url)
        done = run_py(
            "--config-dir",
            str(config_dir),
            "-m",
            "setting=qsplit_keyed",
            "logger=wandb",
            "hydra/launcher=submitit_local",
            "eval.ks=[3]",
            timeout=600,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert server.requests, "the LLM was asked"
    for request in server.requests:  # what is redacted everywhere is still sent
        assert request.headers["x-zugang"] == values["header, config file"]
        assert request.headers["x-db-pass"] == values["header, env interpolation"]
        assert request.query == {"zugang": values["query parameter, local override"]}
    assert list((isolated_paths / "cache" / "llm").rglob("*.json")), "answers were cached"
    (sweep_dir,) = (isolated_paths / "logs" / "multirun").glob("*/*")
    assert list(sweep_dir.glob(".submitit/*/*_submitted.pkl")) and list(sweep_dir.glob(".submitit/*/*_result.pkl"))
    assert list(wandb_dir.rglob("run-*.wandb")), "W&B recorded the run"
    (manifest,) = _manifests(isolated_paths / "results")
    params = manifest["config"]["setting"]["method"]["llm"]["params"]
    assert params == {
        "extra_headers": {"X-Zugang": REDACTED, "X-Db-Pass": REDACTED},
        "extra_query": {"zugang": REDACTED},
    }
    assert _leaks(isolated_paths, {**planted, **values}, done.stdout, done.stderr) == []


def test_a_printed_config_is_redacted():
    """``--cfg``: Hydra prints the composed config, config files' literals included."""
    from vldocir.apps.app import redact_printed_config

    header, url_password = _secret(), _secret()
    printed = (
        "retriever:\n  id: dom_bm25\n"
        f"  remark: copied {header}\n"  # a carrier's value elsewhere: found by value
        "llm:\n  params:\n    extra_headers:\n"
        f"      X-Zugang: {header}\n      X-Ref: ${{oc.env:DB_PASS}}\n"
        f"  base_url: http://me:{url_password}@host/v1\n"
    )
    shown = redact_printed_config(printed)
    assert header not in shown and url_password not in shown and "${oc.env:DB_PASS}" in shown
    assert "id: dom_bm25" in shown and f"X-Zugang: '{REDACTED}'" in shown
    assert redact_printed_config("depth: 5\n") == "depth: 5\n", "nothing to redact: as printed"
    assert redact_printed_config(f"# @package llm\nextra_query:\n  k: {header}\n").startswith("# @package llm\n")


def test_cfg_with_resolve_prints_no_secret(monkeypatch, capsys):
    """``--cfg job --resolve`` resolves an environment reference into what it prints."""
    from vldocir.apps.app import hydra_app

    value = _secret()
    monkeypatch.setenv("DB_PASS", value)

    @hydra_app("audit", config_name="audit")
    def main(cfg):
        raise AssertionError("--cfg runs no task")

    header = "++llm.params.extra_headers.X-Db-Pass=${oc.env:DB_PASS}"
    monkeypatch.setattr(sys, "argv", ["audit.py", header, "--cfg", "job", "--resolve"])
    main()
    out = capsys.readouterr().out
    assert "X-Db-Pass:" in out and value not in out


@pytest.mark.parametrize(
    "app_config", sorted(p.stem for p in (REPO_ROOT / "conf").glob("*.yaml") if p.stem != "paper_tables")
)
def test_every_apps_sweep_moves_its_secrets_into_the_environment(app_config):
    """Every Hydra app (run.py's conf/config.yaml and each app's conf/<app>.yaml) registers the callback
    that turns a sweep's secrets into environment references before its launcher pickles the config."""
    from omegaconf import OmegaConf

    callbacks = OmegaConf.load(REPO_ROOT / "conf" / f"{app_config}.yaml").hydra.get("callbacks") or {}
    assert "vldocir.launch.SecretsFromEnvironment" in {c.get("_target_") for c in callbacks.values()}


def test_clearing_a_header_mapping_on_the_command_line_is_no_secret():
    from vldocir.manifest import carries_a_literal

    assert not carries_a_literal("queries.llm.params.extra_headers=null")
    assert not carries_a_literal("queries.llm.params.extra_query={}")
    assert carries_a_literal("queries.llm.params.extra_headers.X-Db-Pass=abcd")

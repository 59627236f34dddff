"""The one wrapper of every Hydra app (``run.py`` and ``python -m vldocir.apps.<name>``).

::

    @hydra_app("build", config_name="build")
    def main(cfg: DictConfig) -> None:
        ...

    if __name__ == "__main__":
        main()

``main()`` then:

1. refuses a secret passed on the command line, before Hydra writes ``argv`` anywhere
   (:func:`vldocir.launch.refuse_secret_overrides`), and a config option that ``conf/`` lacks
   (``dataset=nosuch``: :func:`unknown_option`) in one line, before Hydra's own many-line message;
   and lets ``argv`` be rewritten (run.py's :func:`vldocir.launch.multirun_cfg_argv`);
2. composes the config from the repository's ``conf/`` through ``hydra.main`` (what ``--cfg``
   prints redacted by vldocir.manifest's rule: :func:`redact_printed_config`) and runs the task,
   whose return value Hydra keeps (run.py's swept metric). Before the task, in every job (submitit's
   job processes too), log records are scrubbed of secrets from then on
   (:func:`vldocir.manifest.install_log_redaction`) and the files Hydra wrote for the job
   (``.hydra/*.yaml``, a sweep's ``multirun.yaml``) are redacted in place
   (:func:`redact_hydra_files`): a secret a config file holds (``conf/local/``) reaches them
   although none can come from the command line. First of all, the secrets the config sends
   (values under secret-looking keys, HTTP header and query values, URL user-info, token-like
   environment values) are declared to the redaction rule, and the config's literals holding one
   become environment references (:func:`vldocir.launch.secrets_to_environment`), so that what
   Hydra keeps of the job (submitit's ``*_result.pkl``) holds none;
3. prints what the user can fix as one stderr line, ``<app> error: <what and where>``, and exits
   with status 2: every :class:`~vldocir.errors.VldocirError`, every ``OSError`` (the path it
   names and, for a full disk, a quota or a size limit, the free space there), and a config
   node's parameter check that fails under ``hydra.utils.instantiate`` (named by its key), and a
   mandatory value (``???``) left unset (named by its key);
   ``Ctrl-C`` is one line and status 130. Anything else is a bug and keeps its traceback.

A task that holds a resource (run.py's tracker) closes it in its own ``finally``, which runs
before the line is printed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vldocir.apps import CONFIG_DIR
from vldocir.errors import VldocirError
from vldocir.manifest import install_log_redaction, redact_secrets, redact_text

ERROR_STATUS = 2
"""The exit status of a run that stopped on something the user can fix (as for a usage error)."""
INTERRUPTED_STATUS = 130
"""The exit status of a run stopped by Ctrl-C (128 + SIGINT, what shells report)."""

Task = Callable[[Any], Any]


def error_line(app: str, error: BaseException) -> str | None:
    """The one line ``app`` prints for ``error``, or None when ``error`` is a bug (keep its traceback)."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import MissingMandatoryValue

    from vldocir.io import describe_os_error

    if isinstance(error, MissingMandatoryValue):
        key = getattr(error, "full_key", None) or "a config value"
        return f"{app} error: {key}: a value is required (add {key}=... to the command line)"
    if isinstance(error, InstantiationException):  # raised by a constructor that hydra.utils.instantiate called
        cause = error.__cause__
        if isinstance(cause, (ValueError, TypeError)) and not isinstance(cause, VldocirError):
            # A parameter check (or an unknown parameter) of the node: a config value, as pipeline judges it.
            key = next(
                (line.removeprefix("full_key: ") for line in str(error).splitlines() if line.startswith("full_key: ")),
                None,
            )
            return f"{app} error: {key + ': ' if key else ''}{' '.join(str(cause).split())}"
        if isinstance(cause, (VldocirError, OSError)):
            error = cause
    if isinstance(error, VldocirError):
        message = str(error)
    elif isinstance(error, OSError):
        message = describe_os_error(error)
    else:
        return None
    message = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return redact_text(f"{app} error: {message or type(error).__name__}")


@contextmanager
def one_line_errors(app: str) -> Iterator[None]:
    """Turn what the user can fix into one stderr line and exit status 2 (see the module docstring)."""
    try:
        yield
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (vldocir.subprocesses.Terminated)
        print(f"{app}: {str(interrupt) or 'interrupted'}", file=sys.stderr)
        raise SystemExit(getattr(interrupt, "exit_status", INTERRUPTED_STATUS)) from None
    except Exception as error:
        line = error_line(app, error)
        if line is None:
            raise
        print(line, file=sys.stderr)
        raise SystemExit(ERROR_STATUS) from None


_GROUP_OPTION = re.compile(r"^(?P<group>[A-Za-z_]\w*)=(?P<option>[\w.-]+)$")


def unknown_option(argv: list[str]) -> str | None:
    """The first ``<group>=<option>`` of ``argv`` naming a config group of ``conf/`` that has no such
    option (``dataset=nosuch``), as a message; None when every one exists. Sweeps, globs, ``null``
    and nested groups are left to Hydra. A ``--config-dir`` (``-cd``) adds its own options."""
    extra = [Path(v) for flag, v in itertools.pairwise(argv) if flag in ("--config-dir", "-cd")]
    extra += [Path(a.partition("=")[2]) for a in argv if a.startswith("--config-dir=")]
    for argument in argv[1:]:
        match = _GROUP_OPTION.match(argument)
        if not match or match["option"] == "null" or not (CONFIG_DIR / match["group"]).is_dir():
            continue
        folder = CONFIG_DIR / match["group"]
        if not any((root / match["group"] / f"{match['option']}.yaml").is_file() for root in (CONFIG_DIR, *extra)):
            options = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
            return f"{argument}: conf/{match['group']}/ has no option '{match['option']}' (one of: {options})"
    return None


def redact_hydra_files() -> list[Path]:
    """Redact the YAML files Hydra wrote for the running job (its ``.hydra/`` directory and, in a
    multirun, the sweep's ``multirun.yaml``) by vldocir.manifest's rule; returns those rewritten.
    A file is rewritten only when it holds a secret, so Hydra's own files stay as written otherwise."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from vldocir.io import atomic_write_text

    if not HydraConfig.initialized():
        return []
    hydra = HydraConfig.get()
    files = []
    if hydra.output_subdir is not None:
        files += sorted((Path(hydra.runtime.output_dir) / str(hydra.output_subdir)).glob("*.yaml"))
    if hydra.mode is not None and hydra.mode.name == "MULTIRUN":
        files.append(Path(hydra.sweep.dir) / "multirun.yaml")
    rewritten = []
    for path in files:
        try:
            tree = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        except (OSError, ValueError):  # gone, or not ours to parse: nothing of it is written by us
            continue
        redacted = redact_secrets(tree, keep_references=True)
        if redacted != tree:
            atomic_write_text(OmegaConf.to_yaml(OmegaConf.create(redacted)), path)
            rewritten.append(path)
    return rewritten


@contextmanager
def hydra_os_errors_in_one_line(app: str) -> Iterator[None]:
    """An ``OSError`` of Hydra's own before the task (its output folder, ``.hydra/*.yaml``, the log
    file: a full disk) as one line naming the file and the free space there, status 2, instead of
    Hydra's traceback and status 1. (Hydra reports what its run raises in ``run_and_report``; the
    task's own errors never reach it: :func:`one_line_errors` has turned them into a line.) A log
    file that cannot be written prints no traceback per record (``logging.raiseExceptions``)."""
    import hydra._internal.utils as hydra_internal
    import hydra.core.utils as hydra_core

    from vldocir.io import naming_path

    report, save = hydra_internal.run_and_report, hydra_core._save_config

    def save_config(cfg, filename, output_dir):  # a failed flush names no file: name the one written
        with naming_path(Path(output_dir) / filename):
            return save(cfg, filename, output_dir)

    def run_and_report(func):
        def run():
            try:
                return func()
            except OSError as error:
                print(error_line(app, error), file=sys.stderr)
                raise SystemExit(ERROR_STATUS) from None

        return report(run)

    hydra_internal.run_and_report, hydra_core._save_config = run_and_report, save_config
    logging.raiseExceptions = False  # a log file on a full disk: no traceback per record (the writes say it)
    try:
        yield
    finally:
        hydra_internal.run_and_report, hydra_core._save_config = report, save


def redact_printed_config(text: str) -> str:
    """What Hydra's ``--cfg job|hydra|all`` printed (a config as YAML, a ``# @package`` line
    first with ``--package``, or one value), redacted by vldocir.manifest's rule: values under
    secret-looking keys and header/query mappings, secrets by value, and every value the config
    sends as a credential wherever else it appears (its literals are printed as composed)."""
    import yaml

    from vldocir.manifest import MIN_DECLARED_LENGTH, config_secrets, known_secrets

    head = "".join(line for line in text.splitlines(keepends=True) if line.startswith("# @package"))
    body = text[len(head) :] if text.startswith(head) else text
    try:
        tree = yaml.safe_load(body)
    except yaml.YAMLError:
        return redact_text(text)
    if not isinstance(tree, (dict, list)):
        return redact_text(text)
    secrets = sorted(
        {*known_secrets(), *(v for v in config_secrets(tree) if len(v) >= MIN_DECLARED_LENGTH)}, key=len, reverse=True
    )
    redacted = redact_secrets(tree, secrets, keep_references=True)
    if redacted == tree:
        return text
    from omegaconf import OmegaConf

    return head + OmegaConf.to_yaml(OmegaConf.create(redacted))


def _shows_config(argv: list[str]) -> bool:
    return any(a in ("--cfg", "-c") or a.startswith("--cfg=") for a in argv)


def hydra_app(
    app: str, config_name: str, argv: Callable[[list[str]], list[str]] | None = None
) -> Callable[[Task], Callable[[], Any]]:
    """Make ``task(cfg)`` the app ``app`` composing ``conf/<config_name>.yaml`` (see the module docstring).

    ``argv``: a rewrite of ``sys.argv`` applied after the secret guard, before Hydra parses it.
    """

    def decorate(task: Task) -> Callable[[], Any]:
        import hydra

        @functools.wraps(task)  # (Hydra names the job and its log file after the wrapped task's file)
        def job(cfg):
            with one_line_errors(app):
                from vldocir.launch import secrets_to_environment

                secrets_to_environment(cfg)  # the config's secrets held in memory, its literals references
                install_log_redaction()  # Hydra has configured the job's logging by now
                redact_hydra_files()
                return task(cfg)

        composed = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=config_name)(job)

        @functools.wraps(task)
        def main() -> Any:
            from vldocir.launch import refuse_secret_overrides

            refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
            unknown = unknown_option(sys.argv)
            if unknown is not None:
                print(f"{app} error: {unknown}", file=sys.stderr)
                raise SystemExit(ERROR_STATUS)
            if argv is not None:
                sys.argv = argv(sys.argv)
            with hydra_os_errors_in_one_line(app):
                if not _shows_config(sys.argv):
                    return composed()
                printed = io.StringIO()  # --cfg: Hydra prints the composed config, literals of config files included
                try:
                    with contextlib.redirect_stdout(printed):
                        return composed()
                finally:
                    sys.stdout.write(redact_printed_config(printed.getvalue()))

        return main

    return decorate

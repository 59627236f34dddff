"""The package's exceptions: one base class for every error the user can fix.

- :class:`VldocirError`: the base of every domain error of the package (a bad config value, a
  malformed benchmark, a damaged artifact, an unreadable sheet, ...). Its message is one line that
  names what is wrong and where (the key, table, file, row). Every app (``run.py`` and
  ``python -m vldocir.apps.<name>``, through :mod:`vldocir.apps.app`) prints it as
  ``<app> error: <message>`` and exits with status 2; any other exception is a bug and keeps its
  traceback. Subclasses keep a second base (``ValueError``, ``RuntimeError``, ...) where callers
  catch that.
- :class:`ConfigError`: a config value that cannot work. :mod:`vldocir.config_checks` raises it
  before any work; a retriever raises subclasses of it when a value can only be judged while the
  job runs (e.g. a model revision that does not resolve to a commit).
- :class:`MissingDependencyError`: an optional package or program that is not installed.

A write that fails on a full disk is :class:`vldocir.io.WriteError` (also an ``OSError``).
"""

from __future__ import annotations


class VldocirError(Exception):
    """An error the user can fix; the message is one line naming what is wrong and where."""


class ConfigError(VldocirError, ValueError):
    """A config value that cannot work; the message is one line naming the key."""


class MissingDependencyError(VldocirError, ImportError):
    """An optional package or program that is not installed; the message names how to install it."""

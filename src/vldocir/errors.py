"""Exceptions raised in one layer and caught in a higher one.

- :class:`ConfigError`: a config value that cannot work. :mod:`vldocir.config_checks` raises it
  before any work; a retriever raises subclasses of it when a value can only be judged while the
  job runs (e.g. a model revision that does not resolve to a commit). ``run.py`` prints it as one
  line and exits with status 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work; the message is one line naming the key."""

"""Alias of :mod:`vldocir.reporting` for the command named in the reporting issue:
``python -m vldocir.report.viewer <run dir>`` runs :func:`vldocir.reporting.viewer.main`."""

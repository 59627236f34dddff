"""``python -m vldocir.report.viewer``: the failure viewer (:mod:`vldocir.reporting.viewer`)."""

from vldocir.reporting.viewer import main

if __name__ == "__main__":
    raise SystemExit(main())

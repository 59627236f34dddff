"""``python -m vldocir.store``: the command line of :mod:`vldocir.store.cli`."""

from vldocir.store.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""The benchmark and the run as data: table schemas, reading and writing, validation, fingerprint.

- ``schema``: the five tables' and the run's Arrow schemas;
- ``tables``: locating and reading a benchmark's table files;
- ``benchmark``: load, validate, fingerprint and write a benchmark;
- ``validation`` / ``fingerprint``: the checks on load, and the content hash;
- ``runs``: a run (top-N pages per query) built, written and read;
- ``evidence``: where evidence lands and the structure it makes, the rule of every query path
  (generated, imported or the user's own).
"""

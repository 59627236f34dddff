"""Importers: other benchmarks (BEIR, ViDoRe v1-v3, MMLongBench-Doc, MMDocIR, LongDocURL) turned into
this project's five tables and ``benchmark.json``, one module per format behind :mod:`.base`."""

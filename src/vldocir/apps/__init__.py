"""The Hydra apps besides ``run.py``, each run as ``python -m vldocir.apps.<name>`` (or its Make target).

| app | job | Make target |
|---|---|---|
| ``build`` | build a benchmark (generated HTML, or your own documents) | ``make mini``, ``make build`` |
| ``collect`` | fetch source documents (Wikipedia, arXiv, PMC, SEC) | ``make collect`` |
| ``sample_evidence`` | evidence configurations over a rendered benchmark | ``make evidence`` |
| ``generate_queries`` | new VLM queries over a rendered benchmark | ``make generate`` |
| ``cleaning_ablations`` | the query-cleaning ablations (Tables 6-10) | ``make cleaning-ablations`` |
| ``report`` | tables, figures and the reproduction check from the results store | ``make tables``, ``make check`` |
| ``audit`` | the query audit (Table 12) and the bounding-box census | ``make audit`` |
| ``import_benchmark`` | import another benchmark (ViDoRe, MMLongBench-Doc, MMDocIR, LongDocURL, BEIR) | |
| ``export_benchmark`` | a benchmark in the ViDoRe v3 hub layout with its dataset card (``push=``: to the hub) | |

Every app, ``run.py`` included, is a task under one wrapper (:func:`vldocir.apps.app.hydra_app`): the
secret guard, its config composed from the repository's ``conf/`` (``CONFIG_DIR``), and what the user
can fix as one stderr line ``<app> error: ...`` with exit status 2.
"""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[3] / "conf"
"""The repository's Hydra config directory (the package is installed editable from the checkout)."""

"""The paper's side of a reproduction: its published numbers and the map from its rows to runs.

- ``results/paper/*.csv``: the published tables, copied from the paper (``results/paper/README.md``
  says where each comes from and how the CSVs are written).
- ``conf/paper_tables.yaml``: for every table and figure, which run (retriever id, setting id,
  optionally another benchmark) each printed row maps to, plus the table's layout parameters.

Nothing here reads the results store; :mod:`vldocir.reporting.store_view` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import VldocirError

METRIC_LABELS = {"ndcg": "nDCG", "recall": "Recall", "ndcgall": "nDCGAll", "recallall": "RecallAll"}


def metric_label(column: str) -> str:
    """``recallall@5`` -> ``RecallAll@5`` (the paper's spelling); other names pass through."""
    name, _, k = column.partition("@")
    return f"{METRIC_LABELS[name]}@{k}" if name in METRIC_LABELS and k else column


class PaperSpecError(VldocirError, ValueError):
    """conf/paper_tables.yaml and the published CSVs disagree (a row without a mapping, ...)."""


@dataclass(frozen=True)
class RunRef:
    """Where a paper row's run lives in the results store, and how to make it.

    ``benchmark`` is ``None`` for "the benchmark being compared", or a template such as
    ``"{benchmark}-reduced"`` for rows evaluated on another benchmark (Table 18).
    """

    retriever: str
    setting: str
    status: str = ""
    overrides: tuple[str, ...] = ()
    benchmark: str | None = None
    dataset: str | None = None

    @classmethod
    def from_entry(cls, entry: dict[str, Any] | None) -> RunRef | None:
        if entry is None:
            return None
        return cls(
            retriever=str(entry["retriever"]),
            setting=str(entry["setting"]),
            status=str(entry.get("status", "")),
            overrides=tuple(str(o) for o in entry.get("overrides", ())),
            benchmark=entry.get("benchmark"),
            dataset=entry.get("dataset"),
        )

    def benchmark_for(self, compared: str) -> str:
        return compared if self.benchmark is None else self.benchmark.format(benchmark=compared)

    def store_path(self, compared: str) -> str:
        return f"{self.benchmark_for(compared)}/{self.retriever}/{self.setting}"

    def command(self, dataset: str) -> str:
        """The ``run.py`` call that makes this run on the paper's benchmark (``dataset``: its
        conf/dataset entry, unless the row names its own)."""
        overrides = " ".join(self.overrides) if self.overrides else f"setting={self.setting}"
        return f"python run.py dataset={self.dataset or dataset} retriever={self.retriever} {overrides}"


@dataclass
class PaperSpec:
    """``conf/paper_tables.yaml`` plus the directory of published CSVs."""

    benchmark: str
    dataset: str
    tolerance: float
    depth: int | None
    ks: tuple[int, ...]
    labels: dict[str, dict[str, list[str]]]
    runs: dict[str, RunRef]
    tables: dict[str, dict[str, Any]]
    figures: dict[str, dict[str, Any]]
    paper_dir: Path
    _csv_cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, manifest: str | Path, paper_dir: str | Path) -> PaperSpec:
        raw = yaml.safe_load(Path(manifest).read_text())
        labels = {
            kind: {k: list(v) if isinstance(v, list) else [v] for k, v in table.items()}
            for kind, table in raw.get("labels", {}).items()
        }
        return cls(
            benchmark=str(raw["benchmark"]),
            dataset=str(raw.get("dataset", raw["benchmark"])),
            tolerance=float(raw.get("tolerance", 0.05)),
            depth=raw.get("depth"),
            ks=tuple(int(k) for k in raw.get("ks", ())),
            labels=labels,
            runs={name: RunRef.from_entry(entry) for name, entry in raw.get("runs", {}).items()},
            tables=dict(raw.get("tables", {})),
            figures=dict(raw.get("figures", {})),
            paper_dir=Path(paper_dir),
        )

    # -- published numbers ---------------------------------------------------------------------

    def csv(self, name: str) -> pd.DataFrame:
        """A published table as printed (``facts.md``: no thousands separators, ``–`` -> empty)."""
        if name not in self._csv_cache:
            path = self.paper_dir / name
            if not path.is_file():
                raise PaperSpecError(f"published table {path} not found (results/paper/ holds the paper's CSVs)")
            self._csv_cache[name] = pd.read_csv(path)
        return self._csv_cache[name].copy()

    # -- labels ----------------------------------------------------------------------------------

    def _lookup(self, kind: str, label: str) -> str:
        for key, spellings in self.labels.get(kind, {}).items():
            if label == key or label in spellings:
                return key
        raise PaperSpecError(
            f"unknown {kind[:-1]} label {label!r}: add it under labels.{kind} in conf/paper_tables.yaml"
        )

    def structure_id(self, label: str) -> str:
        return self._lookup("structures", label)

    def source_id(self, label: str) -> str:
        return self._lookup("sources", label)

    def structure_label(self, structure: str) -> str:
        return self.labels.get("structures", {}).get(structure, [structure])[0]

    def source_label(self, source: str) -> str:
        return self.labels.get("sources", {}).get(source, [source])[0]

    def element_type_label(self, element_type: str) -> str:
        return self.labels.get("element_types", {}).get(element_type, [element_type])[0]

    @property
    def structures(self) -> list[str]:
        return list(EVIDENCE_STRUCTURES)

    @property
    def sources(self) -> list[str]:
        return list(self.labels.get("sources", {}))

    # -- runs --------------------------------------------------------------------------------------

    def row_ref(self, entry: dict[str, Any], label: str) -> RunRef | None:
        """The run of the printed row ``label`` of a table/figure entry (``None``: not evaluated)."""
        rows = entry.get("rows") or {}
        if label not in rows:
            raise PaperSpecError(
                f"row {label!r} of {entry.get('csv')} has no mapping under its 'rows' in conf/paper_tables.yaml"
            )
        return RunRef.from_entry(rows[label])

    def all_runs(self) -> dict[str, RunRef]:
        """Every run the manifest maps, on the compared benchmark, keyed by a readable label."""
        refs: dict[str, RunRef] = {}
        for ref in self.runs.values():
            if ref is not None and ref.benchmark is None:
                refs.setdefault(f"{ref.retriever}/{ref.setting}", ref)
        for entries in (self.tables, self.figures):
            for entry in entries.values():
                for value in (entry.get("rows") or {}).values():
                    if not (isinstance(value, dict) and "retriever" in value):
                        continue
                    # A sweep row ("ctx-n{n_ctx}") stands for one run per value of the entry's n_ctx.
                    settings = (
                        [str(value["setting"]).format(n_ctx=n) for n in entry.get("n_ctx", [])]
                        if "{n_ctx}" in str(value["setting"])
                        else [str(value["setting"])]
                    )
                    for setting in settings:
                        ref = RunRef.from_entry({**value, "setting": setting})
                        if ref.benchmark is None:
                            refs.setdefault(f"{ref.retriever}/{ref.setting}", ref)
        return refs


def load_spec(manifest: str | Path = "conf/paper_tables.yaml", paper_dir: str | Path = "results/paper") -> PaperSpec:
    """Load the manifest and the published CSVs (defaults are relative to the repository root, the
    working directory of ``make tables``)."""
    return PaperSpec.load(manifest, paper_dir)

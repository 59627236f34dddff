"""The compared benchmark's own tables, for the reports that describe the benchmark rather than runs:
Table 1 (documents and pages per source), Figs. 5 and 6 (documents per domain, pages per document)
and Fig. 7 (the queries' evidence types).

:func:`locate_benchmark` finds its directory, first that gives one:

1. ``benchmark_dir`` (conf/report.yaml), when set;
2. the directory its runs in the results store were evaluated on (``manifest.json``: benchmark.root);
3. the ``conf/dataset`` entry whose ``name`` is the benchmark's, its ``source`` resolved with the
   report's paths (so ``VLDOCIR_BENCHMARK`` or ``paths.data_dir`` point it at the full benchmark).

When none gives a local benchmark directory, :attr:`BenchmarkView.found` says why in one line and
the reports show missing cells. Only the columns a report needs are read (no validation, no
fingerprint), so a paper-scale benchmark costs seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vldocir.data.benchmark import HUB_PREFIX, INFO_FILE
from vldocir.data.tables import read_table, table_location
from vldocir.errors import ConfigError

DOCUMENT_COLUMNS = ["doc_id", "source", "domain", "n_pages"]
QUERY_COLUMNS = ["query_id", "source", "evidence_structure", "evidence_types"]


@dataclass
class BenchmarkView:
    """The benchmark ``name``: its directory ``root`` (``None``: not available here), ``found`` (where
    the directory came from, or why there is none) and ``dataset`` (its conf/dataset entry, if any)."""

    name: str
    root: Path | None
    found: str
    dataset: str | None = None
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def path(self) -> Path | None:
        return self.root

    @property
    def label(self) -> str:
        return f"the benchmark {self.name}"

    def _read(self, name: str, columns: list[str]) -> pd.DataFrame | None:
        if self.root is None:
            return None
        if name not in self._tables:
            self._tables[name] = read_table(table_location(self.root, name), columns).to_pandas()
        return self._tables[name]

    def documents(self) -> pd.DataFrame | None:
        """``doc_id, source, domain, n_pages`` of every document; ``None`` when not available."""
        return self._read("documents", DOCUMENT_COLUMNS)

    def queries(self) -> pd.DataFrame | None:
        """``query_id, source, evidence_structure, evidence_types`` of every query; ``None`` when not available."""
        return self._read("queries", QUERY_COLUMNS)


def _is_benchmark(path: Path) -> bool:
    return (path / INFO_FILE).is_file()


def dataset_entry(name: str, dataset_dir: Path, paths: Mapping) -> tuple[str, str] | None:
    """``(entry, source)`` of the conf/dataset entry named ``name`` (``source`` resolved with
    ``paths``), or ``None``. Derived datasets (the reduced corpora: a ``defaults`` list) are made
    from another entry at run time and have no source of their own."""
    for path in sorted(dataset_dir.glob("*.yaml")):
        raw = OmegaConf.load(path)
        if "defaults" in raw:
            continue
        node = OmegaConf.create({"paths": dict(paths), "dataset": raw})
        try:
            if str(node.dataset.name) == name:
                return path.stem, str(node.dataset.source)
        except OmegaConfBaseException:  # an interpolation these paths cannot resolve: not this entry
            continue
    return None


def locate_benchmark(
    name: str,
    runs_root: Path | None = None,
    *,
    requested: str | Path | None = None,
    paths: Mapping | None = None,
    dataset_dir: Path | None = None,
) -> BenchmarkView:
    """The directory of the benchmark ``name`` (see the module docstring for the order).

    ``runs_root`` is the directory its runs recorded (:meth:`ResultsView.benchmark_dir`);
    ``paths`` (plain values of the paths group) and ``dataset_dir`` (``conf/dataset``) find its
    dataset entry. An explicit ``requested`` directory that is not a benchmark is a :class:`ConfigError`.
    """
    entry = dataset_entry(name, dataset_dir, paths) if dataset_dir is not None and paths is not None else None
    dataset = None if entry is None else entry[0]
    if requested:
        root = Path(requested).expanduser()
        if not _is_benchmark(root):
            raise ConfigError(f"benchmark_dir={root}: not a benchmark directory (no {INFO_FILE})")
        return BenchmarkView(name, root, f"{root} (benchmark_dir)", dataset)
    if runs_root is not None:
        return BenchmarkView(name, runs_root, f"{runs_root} (recorded by its runs in the store)", dataset)
    if entry is None:
        return BenchmarkView(
            name,
            None,
            f"benchmark {name} not available here: no run in the store records its "
            "directory and no conf/dataset entry is named so (set benchmark_dir=DIR)",
        )
    source = entry[1]
    where = f"conf/dataset/{dataset}.yaml"
    if source.startswith(HUB_PREFIX):
        why = f"{where} names the hub dataset {source} (run something on it first, or set benchmark_dir=DIR)"
    elif _is_benchmark(Path(source).expanduser()):
        return BenchmarkView(name, Path(source).expanduser(), f"{source} ({where})", dataset)
    else:
        why = (
            f"{where} points to {source}, which is not a benchmark directory "
            "(set VLDOCIR_BENCHMARK or benchmark_dir=DIR)"
        )
    return BenchmarkView(
        name, None, f"benchmark {name} not available here: no run in the store records its directory and {why}", dataset
    )

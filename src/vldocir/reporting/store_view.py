"""A read-only view of the results store for the reports: which runs exist, and their numbers.

Everything a table or figure shows comes from a store entry (``metrics.json``, or
``per_query.parquet`` when a slice is needed that ``metrics.json`` does not hold, e.g. one
generator's queries) and is aggregated with the harness's own code
(:mod:`vldocir.evaluation.aggregate`), so a reproduced cell means what the pipeline's numbers mean.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path

import pandas as pd

from vldocir.evaluation.aggregate import balanced_by, evidence_completeness, summarise
from vldocir.reporting.benchmark_view import BenchmarkView, locate_benchmark
from vldocir.reporting.paper import PaperSpec, RunRef
from vldocir.store import MANIFEST_FILE, METRICS_FILE, PER_QUERY_FILE, list_runs, select

log = logging.getLogger(__name__)


class StoredRun:
    """One results-store entry, read lazily."""

    def __init__(self, path: Path, benchmark: str, retriever: str, setting: str):
        self.path = Path(path)
        self.benchmark, self.retriever, self.setting = benchmark, retriever, setting
        self._subset_aggregates: dict[tuple, dict | None] = {}

    def __repr__(self) -> str:
        return f"StoredRun({self.label} on {self.benchmark})"

    @property
    def label(self) -> str:
        return f"{self.retriever}/{self.setting}"

    @cached_property
    def metrics(self) -> dict:
        return json.loads((self.path / METRICS_FILE).read_text())

    @cached_property
    def manifest(self) -> dict:
        return json.loads((self.path / MANIFEST_FILE).read_text())

    @cached_property
    def per_query(self) -> pd.DataFrame:
        return pd.read_parquet(self.path / PER_QUERY_FILE)

    @property
    def ks(self) -> list[int]:
        return [int(k) for k in self.metrics["ks"]]

    def benchmark_dir(self) -> Path | None:
        """The benchmark directory the run was evaluated on (``manifest.json``: benchmark.root, which
        every verified entry records)."""
        source = self.manifest["benchmark"]["root"]
        if str(source).startswith("hf://"):
            return None
        path = Path(source)
        return path if (path / "benchmark.json").is_file() else None

    def aggregates(self, subset: Mapping[str, str] | None = None) -> dict[str, dict[str, float]] | None:
        """Micro, Macro, source and domain Macro (percent), over all queries or over the queries
        whose attributes match ``subset`` (e.g. ``{"generator": "GPT-4.1-mini"}``), recomputed by
        :func:`summarise` exactly as the pipeline computes ``metrics.json``."""
        if not subset:
            return self.metrics["aggregates"]
        key = tuple(sorted(subset.items()))
        if key not in self._subset_aggregates:
            frame = self.per_query
            mask = pd.Series(True, index=frame.index)
            for column, value in subset.items():
                mask &= frame[column] == value
            self._subset_aggregates[key] = summarise(frame[mask], self.ks)["aggregates"] if mask.any() else None
        return self._subset_aggregates[key]

    def source_structure(self, source: str, structure: str, column: str) -> float | None:
        cell = self.metrics["breakdowns"]["source_structure"].get(source, {}).get(structure)
        return None if cell is None else cell.get(column)

    def structure(self, structure: str, column: str) -> float | None:
        cell = self.metrics["breakdowns"]["structure"].get(structure)
        return None if cell is None else cell.get(column)

    def balanced(
        self,
        by: str,
        columns: Sequence[str],
        groups: Mapping[str, Sequence[str]] | None = None,
        where: Mapping[str, str] | None = None,
    ) -> pd.DataFrame:
        """:func:`balanced_by` over the per-query rows: per value of ``by`` the structure-balanced
        mean (percent). ``groups`` relabels values first (``{"Image": ["image", "image+text"]}``;
        values in no group are dropped); ``where`` keeps only matching rows."""
        frame = self.per_query
        for column, value in (where or {}).items():
            frame = frame[frame[column] == value]
        if groups is not None:
            relabel = {value: group for group, values in groups.items() for value in values}
            frame = frame.assign(**{by: frame[by].map(relabel)}).dropna(subset=[by])
        if frame.empty:
            return pd.DataFrame(columns=["n_queries", *columns])
        table, _ = balanced_by(frame, by, list(columns))
        return table

    def completeness(self, structure: str, by: str, k: int) -> dict[str, dict[str, dict[str, float]]]:
        """Per value of ``by``: the page- and document-level all/partial/none split (percent) of
        the ``structure`` queries at cut-off ``k`` (:func:`evidence_completeness`)."""
        frame = self.per_query[self.per_query["evidence_structure"] == structure]
        if f"pages_found@{k}" not in frame.columns:
            return {}
        out = {}
        for group, rows in frame.groupby(by):
            split = evidence_completeness(rows, [k])
            out[str(group)] = {level: split[level][f"@{k}"][structure] for level in ("page", "document")}
        return out


class ResultsView:
    """The runs of one benchmark in the results store: one entry per (retriever, setting).

    The store keeps every variant (depth, ks, parameters); a report shows one per run, chosen by
    :func:`vldocir.store.select`: the entries whose ks include ``ks`` (the paper's), of ``depth``
    where there is one, then the newest. :meth:`choices` says which entry was taken and how many
    others there were. Besides runs it knows the benchmark's imported audit (``audit_dir``, Table 12)
    and its own tables (:attr:`bench`, Table 1 and Figs. 5-7).
    """

    def __init__(
        self,
        results_dir: str | Path,
        benchmark: str,
        ks: Sequence[int] = (),
        depth: int | None = None,
        audit_dir: str | Path | None = None,
        entries: pd.DataFrame | None = None,
    ):
        self.results_dir = Path(results_dir)
        self.benchmark = benchmark
        # Where vldocir.apps.audit writes the benchmark's audit (conf/audit.yaml: out_dir), unless told otherwise.
        self.audit_dir = Path(audit_dir) if audit_dir else self.results_dir / "audit" / benchmark
        self.ks, self.depth = tuple(ks), depth
        self.entries = list_runs(self.results_dir) if entries is None else entries  # entries: another view's, read once
        self.index = select(self.entries, ks=ks, depth=depth)
        self._runs: dict[Path, StoredRun] = {}

    def choices(self) -> list[str]:
        """One line per run of the benchmark: the entry used, and the others it was chosen from."""
        rows = self.index[self.index.benchmark == self.benchmark]
        return [
            f"{row.retriever}/{row.setting}: {Path(row.path).name}"
            + (f" (chosen from {row.alternatives + 1} entries)" if row.alternatives else "")
            for row in rows.itertuples()
        ]

    def _stored(self, row) -> StoredRun:
        path = Path(row.path)
        if path not in self._runs:
            self._runs[path] = StoredRun(path, row.benchmark, row.retriever, row.setting)
        return self._runs[path]

    def get(self, ref: RunRef | None) -> StoredRun | None:
        if ref is None:
            return None
        benchmark = ref.benchmark_for(self.benchmark)
        hit = self.index[
            (self.index.benchmark == benchmark)
            & (self.index.retriever == ref.retriever)
            & (self.index.setting == ref.setting)
        ]
        return self._stored(hit.iloc[0]) if len(hit) else None

    def runs(self) -> list[StoredRun]:
        """Every run of the benchmark, mapped by the manifest or not."""
        return [self._stored(row) for row in self.index[self.index.benchmark == self.benchmark].itertuples()]

    def distinct_runs(self) -> list[StoredRun]:
        """One entry per distinct run of the benchmark: per (retriever, setting, run key), so that
        parameter or depth variants filed under one retriever id count separately; each chosen as
        :func:`~vldocir.store.select` chooses (the entry :meth:`get` returns for a run is the one
        chosen here for its run key)."""
        rows = self.entries[self.entries.benchmark == self.benchmark]
        found = []
        for _, group in rows.groupby(["retriever", "setting", "run_key"], sort=True, dropna=False):
            found.extend(self._stored(row) for row in select(group, ks=self.ks, depth=self.depth).itertuples())
        return found

    def any_run(self) -> StoredRun | None:
        """A run of the benchmark, for what every run holds alike (query counts): the first by path."""
        runs = self.runs()
        return runs[0] if runs else None

    def available(self, refs: Mapping[str, RunRef | None]) -> dict[str, StoredRun]:
        """The subset of ``refs`` (label -> run) that exists in the store, in the given order."""
        found = {label: self.get(ref) for label, ref in refs.items()}
        return {label: run for label, run in found.items() if run is not None}

    @cached_property
    def bench(self) -> BenchmarkView:
        """The compared benchmark's own tables: by default in the directory its runs recorded;
        :func:`vldocir.reporting.report_tasks.run` sets the one :func:`locate_benchmark` finds."""
        return locate_benchmark(self.benchmark, self.benchmark_dir())

    def benchmark_dir(self) -> Path | None:
        """The directory of the benchmark (from the first run whose manifest points to one)."""
        for run in self.runs():
            path = run.benchmark_dir()
            if path is not None:
                return path
        return None

    def benchmark_info(self) -> dict:
        """The benchmark's ``benchmark.json`` (its name, sources, fingerprint and, for an imported one,
        ``imported_from`` and ``built_by``); empty where no run points to a readable one."""
        return read_benchmark_info(self.benchmark_dir())


def read_benchmark_info(root: Path | None) -> dict:
    """``<root>/benchmark.json``, or ``{}`` where there is none or it is unreadable."""
    try:
        info = json.loads((Path(root) / "benchmark.json").read_text()) if root is not None else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def imported_benchmarks(index: pd.DataFrame) -> set[str]:
    """The benchmarks of ``index`` (a store index) that were imported from another benchmark's data
    (:mod:`vldocir.importers`: their ``benchmark.json`` has ``imported_from``), read from each one's first entry."""
    found = set()
    for name, group in index.groupby("benchmark"):
        row = group.iloc[0]
        try:
            root = StoredRun(Path(row.path), name, row.retriever, row.setting).benchmark_dir()
        except (OSError, ValueError, KeyError):
            continue
        if "imported_from" in read_benchmark_info(root):
            found.add(str(name))
    return found


def choose_benchmark(results_dir: str | Path, spec: PaperSpec, requested: str | None = None) -> tuple[str, str | None]:
    """Which benchmark's runs to compare with the paper, and a note when it is not the paper's.

    ``requested`` wins. Otherwise the manifest's benchmark if the store has runs of it; otherwise
    the benchmark with the most runs that the manifest maps (ties: by name), so that a store holding
    only the mini benchmark's runs shows them; with no runs at all, the manifest's benchmark.
    Imported benchmarks (ViDoRe, BEIR, ...: :func:`imported_benchmarks`) are never chosen unless
    requested: their sources and structures are not the paper's, and ``make tables`` lists their runs
    under their own benchmark (:func:`vldocir.reporting.other_runs.other_benchmarks`).
    """
    if requested:
        note = (
            None
            if requested == spec.benchmark
            else f"the cells made from runs are runs on {requested}, not on the paper's {spec.benchmark}"
        )
        return requested, note
    index = select(list_runs(results_dir), ks=spec.ks, depth=spec.depth)
    imported = sorted(imported_benchmarks(index) - {spec.benchmark})
    index = index[~index.benchmark.isin(imported)]
    if (index.benchmark == spec.benchmark).any() or index.empty:
        if imported and index.empty:
            return spec.benchmark, (
                f"the store holds runs of imported benchmarks only ({', '.join(imported)}): they are listed "
                "under their own benchmark after the paper tables, not compared with the paper (benchmark=<name> "
                "compares one)"
            )
        return spec.benchmark, None
    mapped = {(ref.retriever, ref.setting) for ref in spec.all_runs().values()}
    counts = {
        name: sum((r, s) in mapped for r, s in zip(group.retriever, group.setting, strict=True))
        for name, group in index.groupby("benchmark")
    }
    best = sorted(counts, key=lambda name: (-counts[name], name))[0]
    note = (
        f"the store has no runs of the paper's benchmark {spec.benchmark}; the cells made from runs are "
        f"runs on {best} ({counts[best]} mapped run(s)), a different benchmark: differences are expected"
    )
    log.warning(note)
    return best, note

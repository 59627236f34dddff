"""Runs in the store that no paper row uses: your own system (``retriever=run_file``), a parameter
or depth variant filed under a paper row's ids, a retriever the paper does not evaluate, and every
run on another benchmark than the compared one (an imported ViDoRe, MMLongBench-Doc or BEIR set, a
synthetic corpus).

``make tables`` lists them after the paper tables (a section of ``<out_dir>/tables/README.md``
and the console), one row per run and aggregate with the paper's headline metrics at the paper's
ks (``conf/paper_tables.yaml``: ``ks``), from each entry's ``metrics.json``. A run is one run key
(:meth:`~vldocir.reporting.store_view.ResultsView.distinct_runs`); a paper row uses the entry
:meth:`~vldocir.reporting.store_view.ResultsView.get` picks for it, and every other run is listed.
Runs on other benchmarks come after, one section per benchmark (:func:`other_benchmarks`: its
name, fingerprint, where it was imported from, its structures), also written as
``other_runs.md`` and ``other_runs.tex`` (:func:`write_other_runs`). A benchmark evaluated
without the paper's ks gets columns for the ks it has; its Macro is over the structures it has
queries for (``metrics.json``: ``macro_structures``), and the section says which. A benchmark with a
protocol also shows its **main score** (``metrics.json``: ``protocol.mean``), e.g. ``Main nDCG@10``.

``mteb_results=<folder>`` (``conf/report.yaml``) adds **external rows**: the mteb result files of the
folder (:mod:`vldocir.interop.mteb_results`) whose task is a listed benchmark's (its
``protocol.mteb_task``, or ``VLDocIR-<benchmark>``), marked :data:`EXTERNAL_MARK` with a footnote:
read as they are, with the keys they hold (mteb's own files have no evidence-complete metrics: –),
never significance-tested (no per-query values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import ConfigError
from vldocir.evaluation.protocol import Protocol
from vldocir.interop.mteb_results import ExternalResult, read_results, task_name_of
from vldocir.io import atomic_write_text
from vldocir.reporting.formats import latex_escape
from vldocir.reporting.paper import PaperSpec, RunRef, metric_label
from vldocir.reporting.store_view import ResultsView, StoredRun

TITLE = "Other runs in the store"
OTHER_BENCHMARKS = "Runs on other benchmarks"
AGGREGATES = {"Macro": "macro", "Micro": "micro"}
METRICS = ("ndcgall", "recallall")
FILE = "other_runs"  # <out_dir>/tables/other_runs.md|tex
EXTERNAL_MARK = "†"
EXTERNAL_PREFIX = {"macro": "macro_", "micro": ""}  # mteb result keys: macro_ndcgall_at_10, ndcgall_at_10


def paper_refs(spec: PaperSpec) -> list[RunRef]:
    """Every run the manifest maps: on the compared benchmark (:meth:`PaperSpec.all_runs`) and on a
    benchmark of its own (Table 18's ``"{benchmark}-reduced"`` rows)."""
    refs = list(spec.all_runs().values())

    def walk(value, n_ctx):
        if isinstance(value, dict) and "retriever" in value and "setting" in value:
            if value.get("benchmark") is not None:
                setting = str(value["setting"])
                settings = [setting.format(n_ctx=n) for n in n_ctx] if "{n_ctx}" in setting else [setting]
                refs.extend(RunRef.from_entry({**value, "setting": s}) for s in settings)
        elif isinstance(value, dict):
            for nested in value.values():
                walk(nested, n_ctx)

    for entries in (spec.tables, spec.figures):
        for entry in entries.values():
            for key in ("rows", "run"):
                walk(entry.get(key) or {}, entry.get("n_ctx", []))
    return refs


def _used(spec: PaperSpec, view: ResultsView) -> set[Path]:
    """The store entries the paper tables use (on any benchmark)."""
    return {run.path for run in (view.get(ref) for ref in paper_refs(spec)) if run is not None}


def other_runs(spec: PaperSpec, view: ResultsView) -> list[StoredRun]:
    """The benchmark's runs that no paper row uses, by retriever, setting and entry name."""
    used = _used(spec, view)
    return [run for run in view.distinct_runs() if run.path not in used]


def main_score(run: StoredRun) -> tuple[str, float] | None:
    """The run's protocol main score (``metrics.json``: ``protocol``): (``ndcg@10``, percent); ``None``
    without a protocol."""
    section = run.metrics.get("protocol") or {}
    name = section.get("main_score")
    value = (section.get("mean") or {}).get(name) if name else None
    return None if value is None else (str(name), float(value))


def _main_column(runs: list[StoredRun]) -> str | None:
    names = {score[0] for score in map(main_score, runs) if score is not None}
    return names.pop() if len(names) == 1 else None


def _mteb_key(column: str) -> str:
    metric, _, k = column.partition("@")
    return f"{metric}_at_{k}"


def runs_table(runs: list[StoredRun], ks, external: list[ExternalResult] = (), main: str | None = None) -> pd.DataFrame:
    """One row per (run, aggregate): ``Run`` (retriever/setting), ``Entry`` (the store entry's
    name), ``Aggregate``, then nDCGAll@k and RecallAll@k (percent) for ``ks``; NaN where the entry
    was evaluated without that k. ``main`` (e.g. ``ndcg@10``): a last column, ``Main nDCG@10``, the
    protocol's main score of each run. ``external``: mteb result files, a row per aggregate after the
    runs (``Run``: ``<model> †``, ``Entry``: ``<revision>/<file>``), their numbers from the file's keys."""
    columns = [f"{metric}@{k}" for metric in METRICS for k in ks]
    main_label = [f"Main {metric_label(main)}"] if main else []
    records = []
    for run in runs:
        aggregates = run.aggregates() or {}
        score = main_score(run)
        for label, key in AGGREGATES.items():
            values = aggregates.get(key, {})
            records.append(
                {
                    "Run": run.label,
                    "Entry": run.path.name,
                    "Aggregate": label,
                    **{metric_label(c): values.get(c, math.nan) for c in columns},
                    **dict.fromkeys(main_label, score[1] if score and score[0] == main else math.nan),
                }
            )
    for result in external:
        for label, key in AGGREGATES.items():
            values = {c: result.scores.get(EXTERNAL_PREFIX[key] + _mteb_key(c)) for c in columns}
            records.append(
                {
                    "Run": f"{result.model} {EXTERNAL_MARK}",
                    "Entry": f"{result.revision}/{result.path.name}",
                    "Aggregate": label,
                    **{metric_label(c): math.nan if v is None else 100 * v for c, v in values.items()},
                    **{m: 100 * result.scores.get(_mteb_key(main), math.nan) for m in main_label},
                }
            )
    return pd.DataFrame(
        records, columns=["Run", "Entry", "Aggregate", *(metric_label(c) for c in columns), *main_label]
    )


def task_names(name: str, runs: list[StoredRun]) -> set[str]:
    """The mteb task names a benchmark's results carry (:func:`~vldocir.interop.mteb_results.task_name_of`):
    its runs' ``protocol.mteb_task`` and ``VLDocIR-<name>``."""
    names = {task_name_of(None, name)}
    for run in runs:
        try:
            protocol = Protocol.from_config(((run.manifest.get("config") or {}).get("dataset") or {}).get("protocol"))
        except ConfigError:
            continue
        names.add(task_name_of(protocol, name))
    return names


def matching(external: list[ExternalResult], name: str, runs: list[StoredRun]) -> list[ExternalResult]:
    """The external results of benchmark ``name`` (matched by task name, :func:`task_names`)."""
    names = task_names(name, runs)
    return [result for result in external if result.task in names]


def external_results(folder) -> tuple[list[ExternalResult], str]:
    """The mteb result files of ``folder`` (``mteb_results``; ``None``: none) and the folder as the
    reports name it. A file that does not read stops the report in one line naming it."""
    if not folder:
        return [], ""
    found = read_results(folder)
    print(f"mteb results (external rows, not significance-tested): {len(found)} file(s) in {folder}")
    return found, str(folder)


def unshown(external: list[ExternalResult], view: ResultsView, benchmarks: list[BenchmarkRuns]) -> list[str]:
    """The task names of external results that no section shows (no listed runs of their benchmark)."""
    shown = {r.path for r in matching(external, view.benchmark, view.runs())}
    shown |= {r.path for bench in benchmarks for r in bench.external}
    return sorted({r.task for r in external if r.path not in shown})


def other_runs_table(spec: PaperSpec, view: ResultsView, external: list[ExternalResult] = ()) -> pd.DataFrame:
    """:func:`runs_table` of :func:`other_runs`, at the paper's ks, with the ``external`` results of the
    compared benchmark's task (``VLDocIR-<benchmark>``)."""
    runs = other_runs(spec, view)
    return runs_table(runs, spec.ks, matching(list(external), view.benchmark, view.runs()))


@dataclass
class BenchmarkRuns:
    """The runs of one benchmark other than the compared one, and what the report says about it."""

    name: str
    runs: list[StoredRun]
    table: pd.DataFrame
    about: list[str] = field(default_factory=list)  # sentences: origin, fingerprint, queries, structures
    external: list[ExternalResult] = field(default_factory=list)  # mteb result files shown beside the runs


def section_ks(runs: list[StoredRun], ks) -> list[int]:
    """The paper's ks, plus those of the runs evaluated without one of them (so that each run shows numbers)."""
    shown = {int(k) for k in ks}
    for run in runs:
        if not shown >= set(run.ks) and not set(run.ks) >= {int(k) for k in ks}:
            shown |= set(run.ks)
    return sorted(shown)


def _counts(counts) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted((counts or {}).items()))


def _structures(run: StoredRun) -> str:
    """Which structures a run's Macro is over: ``page_single 2, cross_doc 1 (none for ...)``."""
    breakdown = run.metrics.get("breakdowns", {}).get("structure", {})
    present = run.metrics.get("macro_structures") or [s for s in EVIDENCE_STRUCTURES if s in breakdown]
    text = ", ".join(f"{s} {int(breakdown.get(s, {}).get('n_queries', 0))}" for s in present)
    absent = [s for s in EVIDENCE_STRUCTURES if s not in present]
    return text + (f" (none for {', '.join(absent)})" if absent else "")


def describe_benchmark(name: str, view: ResultsView) -> list[str]:
    """Sentences on one benchmark of the store: where it comes from (``benchmark.json``:
    ``imported_from``, ``built_by``), its fingerprint(s), queries kept and dropped, and the structures
    each run's Macro is over. Never fails: what cannot be read is said."""
    info = view.benchmark_info()
    runs = view.runs()
    about = []
    origin = info.get("imported_from")
    if isinstance(origin, dict):
        importer = (info.get("built_by") or {}).get("importer") or {}
        details = [
            f"format {origin.get('format', '?')}",
            f"revision {origin.get('revision') or '–'}",
            f"licence {origin.get('license') or '–'}",
        ]
        if importer.get("_target_"):
            details.append(f"importer `{importer['_target_']}`")
        about.append(f"Imported from `{origin.get('source', '?')}` ({', '.join(details)}).")
    elif info:
        about.append(f"Benchmark at `{view.benchmark_dir()}` (not imported).")
    else:
        roots = sorted({str(run.manifest.get("benchmark", {}).get("root", "?")) for run in runs})
        about.append(f"Its benchmark.json is not readable here (recorded root: {', '.join(f'`{r}`' for r in roots)}).")
    fingerprints = sorted({str(run.manifest.get("benchmark", {}).get("fingerprint", "?")) for run in runs})
    about.append(f"Fingerprint{'s' if len(fingerprints) > 1 else ''}: {', '.join(f'`{f}`' for f in fingerprints)}.")
    built = info.get("built_by") or {}
    if isinstance(built.get("kept"), dict) and "queries" in built["kept"]:
        dropped = _counts((built.get("dropped") or {}).get("queries"))
        about.append(f"Queries kept: {built['kept']['queries']}" + (f"; dropped: {dropped}." if dropped else "."))
    listed = view.distinct_runs()
    per_run = {run.label + f" `{run.path.name}`": _structures(run) for run in listed}
    if len(set(per_run.values())) == 1:
        about.append(f"Macro is the mean over the structures with queries: {next(iter(per_run.values()))}.")
    else:
        about.append(
            "Macro is the mean over the structures with queries: "
            + "; ".join(f"{label}: {text}" for label, text in per_run.items())
            + "."
        )
    return about


def other_benchmarks(
    spec: PaperSpec, view: ResultsView, external: list[ExternalResult] = (), where: str = ""
) -> list[BenchmarkRuns]:
    """Every benchmark of the store but ``view``'s, by name, with its runs that no paper row uses
    (those of the benchmarks the paper's own rows name, Table 18's reduced one, are in the paper tables),
    its protocol's main score, and the ``external`` results (read from ``where``) of its task."""
    used = _used(spec, view)
    found = []
    for name in sorted(set(view.entries.benchmark) - {view.benchmark}):
        other = ResultsView(view.results_dir, name, ks=view.ks, depth=view.depth, entries=view.entries)
        runs = [run for run in other.distinct_runs() if run.path not in used]
        if runs:
            main, theirs = _main_column(runs), matching(list(external), name, runs)
            about = describe_benchmark(name, other)
            if main:
                protocol = (runs[0].metrics.get("protocol") or {}).get("name", "?")
                about.append(f"Main score: {metric_label(main)}, the protocol's ({protocol}; mean over its subsets).")
            if theirs:
                about.append(f"{len(theirs)} mteb result file(s) from `{where}` ({EXTERNAL_MARK} rows).")
            table = runs_table(runs, section_ks(runs, spec.ks), theirs, main)
            found.append(BenchmarkRuns(name, runs, table, about, theirs))
    return found


def _caption(view: ResultsView) -> str:
    return (
        f"Runs of `{view.benchmark}` that no paper row uses, one store entry per run (ks including "
        f"{list(view.ks)}, depth {view.depth} preferred, then the newest); percent, – where the entry "
        "was evaluated without that k."
    )


def _number(value) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.2f}"


def _markdown_rows(table: pd.DataFrame) -> list[str]:
    lines = [
        "| " + " | ".join(table.columns) + " |",
        "|" + "|".join([":--"] * 3 + ["--:"] * (len(table.columns) - 3)) + "|",
    ]
    for record in table.itertuples(index=False):
        run, entry, aggregate, *values = record
        lines.append(f"| {run} | `{entry}` | {aggregate} | " + " | ".join(_number(v) for v in values) + " |")
    if _has_external(table):
        lines += ["", EXTERNAL_FOOTNOTE]
    return lines


EXTERNAL_FOOTNOTE = (
    f"{EXTERNAL_MARK} External: an mteb result file (`mteb_results`), read as it is: no per-query values, "
    "so not significance-tested; – where the file holds no such key."
)


def _has_external(table: pd.DataFrame) -> bool:
    return bool(len(table)) and table["Run"].astype(str).str.endswith(EXTERNAL_MARK).any()


def to_markdown(table: pd.DataFrame, view: ResultsView) -> list[str]:
    """The README section (lines), ``## Other runs in the store``."""
    lines = [f"## {TITLE}", "", _caption(view), ""]
    if table.empty:
        return [*lines, "None: every run of this benchmark in the store is a paper row's."]
    return lines + _markdown_rows(table)


def _benchmark_caption(view: ResultsView) -> str:
    return (
        f"Benchmarks in the store other than the compared `{view.benchmark}`, one section each, with their "
        f"runs that no paper row uses: one store entry per run (ks including {list(view.ks)}, depth "
        f"{view.depth} preferred, then the newest); percent, – where the entry was evaluated without that k."
    )


def benchmarks_markdown(benchmarks: list[BenchmarkRuns], view: ResultsView) -> list[str]:
    """The README section (lines), ``## Runs on other benchmarks`` with a ``### <name>`` per benchmark;
    no lines where there is none."""
    if not benchmarks:
        return []
    lines = ["", f"## {OTHER_BENCHMARKS}", "", _benchmark_caption(view)]
    for bench in benchmarks:
        lines += ["", f"### {bench.name}", "", " ".join(bench.about), "", *_markdown_rows(bench.table)]
    return lines


def _latex_table(table: pd.DataFrame, caption: str, label: str) -> list[str]:
    lines = [
        r"\begin{table}[htbp]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\label{{tab:{label}}}",
        r"\resizebox{\linewidth}{!}{%",
        rf"\begin{{tabular}}{{lll{'r' * (len(table.columns) - 3)}}}",
        r"\toprule",
        " & ".join(latex_escape(c) for c in table.columns) + r" \\",
        r"\midrule",
    ]
    previous = None
    for record in table.itertuples(index=False):
        run, entry, aggregate, *values = record
        if previous is not None and (run, entry) != previous:
            lines.append(r"\midrule")
        cells = [latex_escape(run), latex_escape(entry), aggregate, *(latex_escape(_number(v)) for v in values)]
        lines.append(" & ".join(cells) + r" \\")
        previous = (run, entry)
    lines += [r"\bottomrule", r"\end{tabular}%", "}"]
    if _has_external(table):
        lines.append(rf"\par\footnotesize{{{latex_escape(EXTERNAL_FOOTNOTE.replace('`', ''))}}}")
    return [*lines, r"\end{table}"]


def _plain(sentences: list[str]) -> str:
    return " ".join(sentences).replace("`", "")


def write_other_runs(
    table: pd.DataFrame, benchmarks: list[BenchmarkRuns], view: ResultsView, out_dir: Path
) -> list[Path]:
    """``<out_dir>/other_runs.md`` and ``.tex``: the compared benchmark's other runs, then one section
    (one LaTeX table) per other benchmark; written only where there is a run to list (otherwise an
    earlier report's files are removed)."""
    paths = [out_dir / f"{FILE}.md", out_dir / f"{FILE}.tex"]
    if table.empty and not benchmarks:
        for path in paths:
            path.unlink(missing_ok=True)
        return []
    markdown = [
        "# Runs that no paper table shows",
        "",
        f"## {TITLE}: `{view.benchmark}` (compared with the paper)",
        "",
        _caption(view),
        "",
    ]
    markdown += _markdown_rows(table) if not table.empty else ["None: every run of it in the store is a paper row's."]
    markdown += benchmarks_markdown(benchmarks, view)
    latex = [
        f"% {FILE}: generated by vldocir.reporting.other_runs from the results store; do not edit.",
        r"% Needs \usepackage{booktabs,graphicx}.",
    ]
    if not table.empty:
        latex += _latex_table(table, f"{TITLE}: {_plain([_caption(view)])}", f"{FILE}:{view.benchmark}")
    for bench in benchmarks:
        caption = f"Runs on {bench.name}, not compared with the paper. {_plain(bench.about)} Percent; – = no such k."
        latex += ["", *_latex_table(bench.table, caption, f"{FILE}:{bench.name}")]
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text("\n".join(markdown) + "\n", paths[0])
    atomic_write_text("\n".join(latex) + "\n", paths[1])
    return paths


def to_text(table: pd.DataFrame) -> str:
    """The console rendering (the same rows, plain columns)."""
    if table.empty:
        return "  (none)"
    shown = table.assign(**{c: table[c].map(_number) for c in table.columns[3:]})
    lines = shown.to_string(index=False).splitlines() + (
        [EXTERNAL_FOOTNOTE.replace("`", "")] if _has_external(table) else []
    )
    return "\n".join("  " + line for line in lines)


def print_other_runs(table: pd.DataFrame, readme: Path, benchmarks: list[BenchmarkRuns] = ()) -> None:
    print(f"\n{TITLE} (no paper row uses them; also in {readme}):")
    print(to_text(table))
    for bench in benchmarks:
        print(f"\n{OTHER_BENCHMARKS}: {bench.name} (also in {readme.parent / (FILE + '.md')})")
        for sentence in bench.about:
            print(f"  {sentence.replace('`', '')}")
        print(to_text(bench.table))

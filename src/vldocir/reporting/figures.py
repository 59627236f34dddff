"""The paper's figures (matplotlib, PDF and PNG), from the results store or the published numbers.

A figure (or each panel of a multi-panel figure) is drawn from reproduced runs when at least one
of its runs is in the store, and from the published numbers otherwise; its title says which. The
benchmark-statistics figures (5, 6, 7) are drawn from the documents and queries tables of the
compared benchmark (:mod:`vldocir.reporting.benchmark_view` finds it), not from runs. Where the
paper prints a figure without numbers (Figs. 6, 7, 10, 11), the published fallback draws what its
text states (ranges, peaks, the commonest combinations) and says so.

Every figure has a fixed size (:data:`SIZES`, inches, at :data:`DPI`), so the PNG of each is
exactly ``SIZES[name] * DPI`` pixels.
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vldocir.reporting.outputs import ignore_generated
from vldocir.reporting.paper import PaperSpec, RunRef, metric_label
from vldocir.reporting.store_view import ResultsView, StoredRun

log = logging.getLogger(__name__)

DPI = 150
SIZES: dict[str, tuple[float, float]] = {
    "fig2_source_structure": (8.0, 4.0),
    "fig5_domains": (8.0, 6.5),
    "fig6_pages_per_document": (9.0, 6.0),
    "fig7_evidence_types": (10.0, 5.5),
    "fig8_families": (13.0, 4.6),
    "fig9_domain_crossdoc": (8.0, 5.0),
    "fig10_nctx": (7.5, 4.8),
    "fig11_crossdoc_completeness": (13.0, 4.8),
    "fig12_generators": (7.5, 7.0),
}
STRUCTURE_COLORS = {
    "page_single": "#1f77b4",
    "page_multi": "#ff7f0e",
    "doc_adjacent": "#2ca02c",
    "doc_near": "#d62728",
    "doc_far": "#9467bd",
    "cross_doc": "#8c564b",
}
SPLIT_COLORS = {"all": "#2ca02c", "partial": "#ffbf00", "none": "#d62728"}


@dataclass
class FigureResult:
    name: str
    pdf: Path
    png: Path
    origin: str  # "reproduced (...)" or "published (...)": what the figure was drawn from


def _figure(name: str) -> Figure:
    return Figure(figsize=SIZES[name], dpi=DPI, layout="constrained")


def _reproduced(view: ResultsView, runs: dict[str, StoredRun]) -> str:
    listed = ", ".join(runs) if len(runs) <= 4 else f"{', '.join(list(runs)[:4])}, ..."
    return f"reproduced: {len(runs)} run(s) on {view.benchmark} ({listed})"


def _published(what: str) -> str:
    return f"published: {what}; no reproduced runs in the store"


def _published_without_benchmark(what: str, view: ResultsView) -> str:
    return f"published: {what}; the benchmark {view.benchmark} is not available here"


def _placeholder(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9, color="0.35", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _title(fig: Figure, entry: dict, origin: str) -> None:
    """The paper's title, then what the figure was drawn from (wrapped to the figure's width)."""
    width = int(fig.get_figwidth() * 14)
    fig.suptitle(f"{entry['title']}\n" + textwrap.fill(origin, width), fontsize=10)


def _candidates(entry: dict, spec: PaperSpec, view: ResultsView) -> dict[str, StoredRun]:
    """The runs a "best of" figure takes the maximum over: every mapped run (``best_of: all``)."""
    refs = (
        spec.all_runs()
        if entry.get("best_of", "all") == "all"
        else {k: spec.row_ref(entry, k) for k in entry.get("rows", {})}
    )
    return view.available(refs)


def fig2_source_structure(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    metric = entry["metric"]
    runs = _candidates(entry, spec, view)
    structures = spec.structures
    if runs:
        sources = [
            s
            for s in spec.sources
            if any(run.metrics["breakdowns"]["source_structure"].get(s) for run in runs.values())
        ]
        grid = np.full((len(sources), len(structures)), np.nan)
        for i, source in enumerate(sources):
            for j, structure in enumerate(structures):
                values = [run.source_structure(source, structure, metric) for run in runs.values()]
                values = [v for v in values if v is not None]
                grid[i, j] = max(values) if values else np.nan
        origin = _reproduced(view, runs) + "; best run per cell"
    else:
        csv = spec.csv(entry["csv"])
        sources = [spec.source_id(s) for s in csv["source"]]
        grid = csv[structures].to_numpy(dtype=float)
        origin = _published(f"results/paper/{entry['csv']}")
    fig = _figure(name)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="Blues", vmin=0, vmax=100, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        text = "n/a" if np.isnan(value) else f"{value:.1f}"
        ax.text(
            j,
            i,
            text,
            ha="center",
            va="center",
            fontsize=9,
            color="white" if not np.isnan(value) and value > 60 else "black",
        )
    ax.set_xticks(range(len(structures)), [spec.structure_label(s) for s in structures])
    ax.set_yticks(range(len(sources)), [spec.source_label(s) for s in sources])
    fig.colorbar(image, ax=ax, label=metric_label(metric))
    _title(fig, entry, origin)
    return fig, origin


def fig5_domains(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    documents = view.bench.documents()
    if documents is not None:
        counts = documents["domain"].value_counts()
        origin = f"reproduced: documents table of {view.benchmark} ({len(documents)} documents)"
    else:
        csv = spec.csv(entry["csv"])
        counts = pd.Series(csv["documents"].to_numpy(), index=csv["domain"])
        origin = _published_without_benchmark(f"results/paper/{entry['csv']}", view)
    counts = counts.sort_values(ascending=True)
    fig = _figure(name)
    ax = fig.add_subplot()
    bars = ax.barh(counts.index.astype(str), counts.to_numpy(), color="#4c72b0")
    ax.bar_label(bars, labels=[f"{v:,}" for v in counts.to_numpy()], fontsize=7, padding=2)
    ax.set_xlabel("Number of documents")
    ax.tick_params(axis="y", labelsize=8)
    ax.margins(x=0.12)
    _title(fig, entry, origin)
    return fig, origin


def fig6_pages_per_document(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    documents = view.bench.documents()
    width = int(entry.get("bin_width", 5))
    fig = _figure(name)
    axes = fig.subplots(2, 2).ravel()
    if documents is not None:
        origin = f"reproduced: documents table of {view.benchmark} ({len(documents)} documents)"
        for ax, source in zip(axes, spec.sources, strict=True):
            pages = documents.loc[documents["source"] == source, "n_pages"].to_numpy()
            if len(pages):
                bins = np.arange(0, pages.max() + width + 1, width)
                ax.hist(
                    pages, bins=bins, weights=np.full(len(pages), 1 / len(pages)), color="#4c72b0", edgecolor="white"
                )
            else:
                _placeholder(ax, "no documents")
            ax.set_title(f"{spec.source_label(source)} (N={len(pages):,})", fontsize=9)
            ax.set_xlabel("Pages per document")
            ax.set_ylabel("Probability")
    else:
        origin = _published_without_benchmark(
            "Table 1's N and mean pages, and the ranges the text names (the histograms are not printed as numbers)",
            view,
        )
        csv = spec.csv(entry["csv"])
        by_source = {spec.source_id(r["source"]): r for r in csv.to_dict("records") if r["source"] != "Total"}
        for ax, source in zip(axes, spec.sources, strict=True):
            record = by_source.get(source)
            low, high = entry.get("published_ranges", {}).get(source, (None, None))
            if low is not None:
                ax.axvspan(low, high, color="#4c72b0", alpha=0.25, label=f"most documents: {low}-{high} pages")
            if record is not None:
                ax.axvline(
                    record["avg_pages"], color="black", linestyle="--", label=f"mean {record['avg_pages']:.2f} pages"
                )
            ax.set_xlim(0, max(70, (high or 0) + 10))
            ax.set_yticks([])
            docs = f"N={int(record['docs']):,}" if record is not None else ""
            ax.set_title(f"{spec.source_label(source)} ({docs})", fontsize=9)
            ax.set_xlabel("Pages per document")
            ax.legend(fontsize=7, loc="upper right")
    _title(fig, entry, origin)
    return fig, origin


def evidence_type_counts(queries: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Fig. 7's numbers from a queries table (``evidence_types``: a list of element types per query).

    Returns the queries per combination of evidence types (index: the sorted types joined by ``+``,
    the label evaluation gives a query's ``evidence_type``), most common first, and the queries
    per type whose evidence includes it, most common first (ties by name).
    """
    types = queries["evidence_types"].map(lambda t: tuple(sorted(set(t))) if t is not None and len(t) else ("unknown",))
    combinations = types.map("+".join).value_counts()
    per_type = types.explode().value_counts()

    def ordered(counts: pd.Series) -> pd.Series:
        frame = counts.rename("queries").rename_axis("key").reset_index()
        return frame.sort_values(["queries", "key"], ascending=[False, True]).set_index("key")["queries"].astype(int)

    return ordered(combinations), ordered(per_type)


def fig7_evidence_types(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    """An UpSet plot as the paper draws it: bars of queries per evidence-type combination (log
    scale) over a dot matrix of the types in each, and beside it the queries per type."""
    queries = view.bench.queries()
    shown = int(entry.get("max_combinations", 20))
    if queries is not None:
        combinations, per_type = evidence_type_counts(queries)
        origin = f"reproduced: queries table of {view.bench.name} ({len(queries):,} queries)"
        if len(combinations) > shown:
            origin += f"; the {shown} commonest of {len(combinations)} combinations"
        combinations = combinations.head(shown)
        types = list(per_type.index)
    else:
        combinations = pd.Series(entry["published_combinations"], dtype=int)
        per_type = None
        types = list(dict.fromkeys(t for label in combinations.index for t in label.split("+")))
        origin = _published_without_benchmark(
            "the three commonest combinations its text names; the other bars and "
            "the per-type counts are printed without numbers",
            view,
        )
    fig = _figure(name)
    grid = fig.add_gridspec(2, 2, width_ratios=(1, 4), height_ratios=(3, 2))
    bars_ax = fig.add_subplot(grid[0, 1])
    matrix_ax = fig.add_subplot(grid[1, 1], sharex=bars_ax)
    types_ax = fig.add_subplot(grid[1, 0], sharey=matrix_ax)
    x = np.arange(len(combinations))
    bars = bars_ax.bar(x, combinations.to_numpy(), color="#4c72b0")
    bars_ax.bar_label(bars, labels=[f"{v:,}" for v in combinations.to_numpy()], fontsize=6, rotation=90, padding=2)
    bars_ax.set_yscale("log")
    bars_ax.set_ylim(0.8 if combinations.min() < 10 else combinations.min() / 10, combinations.max() * 8)
    bars_ax.set_ylabel("Queries per combination")
    bars_ax.tick_params(axis="x", labelbottom=False)
    y = np.arange(len(types))
    for i, label in enumerate(combinations.index):
        members = [types.index(t) for t in label.split("+")]
        matrix_ax.scatter(np.full(len(y), i), y, color="0.85", s=25, zorder=2)
        matrix_ax.scatter(np.full(len(members), i), members, color="black", s=25, zorder=3)
        if len(members) > 1:
            matrix_ax.plot([i, i], [min(members), max(members)], color="black", linewidth=1.5, zorder=3)
    matrix_ax.set_xticks(x, [""] * len(x))
    matrix_ax.set_ylim(len(types) - 0.5, -0.5)
    matrix_ax.tick_params(axis="y", labelleft=False, length=0)
    matrix_ax.set_xlabel("Evidence-type combination")
    if per_type is not None:
        totals = per_type.reindex(types).to_numpy()
        types_ax.barh(y, totals, color="#4c72b0")
        for i, value in enumerate(totals):  # the x axis is inverted: right-aligned text lies beyond the bar's end
            types_ax.text(value, i, f"{value:,} ", ha="right", va="center", fontsize=6)
        types_ax.margins(x=0.45)
    else:
        types_ax.text(
            0.5, 0.5, "not printed", ha="center", va="center", fontsize=8, color="0.35", transform=types_ax.transAxes
        )
        types_ax.set_xticks([])
    types_ax.invert_xaxis()
    types_ax.set_yticks(y, [spec.element_type_label(t) for t in types], fontsize=8)
    types_ax.set_xlabel("Queries per type")
    _title(fig, entry, origin)
    return fig, origin


def fig8_families(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    table_entry = next(e for e in spec.tables.values() if e.get("csv") == entry["csv"])
    csv = spec.csv(entry["csv"])
    csv = csv[csv["aggregate"] == entry["aggregate"]].set_index("model")
    aggregate = table_entry["aggregates"][entry["aggregate"]]
    ks = entry["ks"]
    fig = _figure(name)
    axes = fig.subplots(1, len(entry["panels"]))
    origins = []
    for ax, (family, variants) in zip(np.atleast_1d(axes), entry["panels"].items(), strict=True):
        runs = {setting: view.get(spec.row_ref(table_entry, row)) for setting, row in variants.items()}
        reproduced = any(run is not None for run in runs.values())
        values = {}
        for setting, row in variants.items():
            if reproduced:
                run = runs[setting]
                values[setting] = [
                    run.aggregates()[aggregate].get(f"recallall@{k}", np.nan) if run else np.nan for k in ks
                ]
            else:
                values[setting] = [csv.loc[row, f"recallall@{k}"] if row in csv.index else np.nan for k in ks]
        origins.append((family, reproduced))
        x = np.arange(len(variants))
        width = 0.8 / len(ks)
        for i, k in enumerate(ks):
            heights = [values[s][i] for s in variants]
            ax.bar(x + (i - (len(ks) - 1) / 2) * width, np.nan_to_num(heights), width, label=f"@{k}")
        labels = [s if not np.all(np.isnan(values[s])) else f"{s}\n(missing)" for s in variants]
        ax.set_xticks(x, labels, fontsize=8, rotation=20)
        finite = [v for s in variants for v in values[s] if not np.isnan(v)]
        if finite:
            ax.set_ylim(max(0, min(finite) - 10), min(100, max(finite) + 5))
        ax.set_title(
            f"{family} ({'reproduced on ' + view.benchmark if reproduced else 'published, Table 13'})", fontsize=9
        )
        ax.set_ylabel(f"{entry['aggregate']} RecallAll@k")
        ax.legend(fontsize=7)
    reproduced_panels = [family for family, reproduced in origins if reproduced]
    if reproduced_panels:
        published_panels = [family for family, reproduced in origins if not reproduced]
        origin = f"reproduced on {view.benchmark}: {', '.join(reproduced_panels)}" + (
            f"; published (Table 13): {', '.join(published_panels)}" if published_panels else ""
        )
    else:
        origin = _published(f"Table 13, {entry['aggregate']} rows")
    _title(fig, entry, origin)
    return fig, origin


def fig9_domain_crossdoc(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    metric = entry["metric"]
    runs = _candidates(entry, spec, view)
    if runs:
        tables = [run.balanced("domain", [metric], where={"evidence_structure": "cross_doc"}) for run in runs.values()]
        tables = [t for t in tables if len(t)]
        best = pd.concat([t[metric] for t in tables], axis=1).max(axis=1) if tables else pd.Series(dtype=float)
        n_queries = tables[0]["n_queries"] if tables else pd.Series(dtype=float)
        threshold = int(entry.get("min_queries", 100))
        keep = n_queries[n_queries >= threshold].index
        selection = f"domains with >= {threshold} Cross-Doc queries"
        if len(keep) == 0:
            keep = n_queries[n_queries >= 1].index
            selection = f"no domain has {threshold} Cross-Doc queries, so every domain with one or more"
        values = best.reindex(keep)
        origin = _reproduced(view, runs) + f"; best run per domain; {selection}"
    else:
        csv = spec.csv(entry["csv"])
        values = pd.Series(csv.iloc[:, 1].to_numpy(dtype=float), index=csv["domain"])
        origin = _published(f"results/paper/{entry['csv']}")
    values = values.sort_values(ascending=False)
    fig = _figure(name)
    ax = fig.add_subplot()
    if len(values):
        bars = ax.bar(values.index.astype(str), values.to_numpy(), color="#4c72b0")
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in values.to_numpy()], fontsize=7)
        ax.tick_params(axis="x", rotation=60, labelsize=8)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
        ax.set_ylim(0, 100)
    else:
        _placeholder(ax, "no Cross-Doc queries in the runs")
    ax.set_ylabel(f"Best Cross-Doc {metric_label(metric)}")
    _title(fig, entry, origin)
    return fig, origin


def fig10_nctx(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    row = next(iter(entry["rows"].values()))
    metric = entry["metric"]
    runs = {}
    for n in entry["n_ctx"]:
        ref = RunRef.from_entry({**row, "setting": row["setting"].format(n_ctx=n)})
        run = view.get(ref)
        if run is not None:
            runs[n] = run
    fig = _figure(name)
    ax = fig.add_subplot()
    structures = entry["structures"]
    if runs:
        for structure in structures:
            points = [(n, run.structure(structure, metric)) for n, run in sorted(runs.items())]
            points = [(n, v) for n, v in points if v is not None]
            if points:
                ax.plot(
                    *zip(*points, strict=True),
                    marker="o",
                    color=STRUCTURE_COLORS[structure],
                    label=spec.structure_label(structure),
                )
        ax.set_ylabel(metric_label(metric))
        origin = f"reproduced: {len(runs)} of {len(entry['n_ctx'])} n_ctx runs on {view.benchmark}"
    else:
        # The paper prints no numbers: draw where its text says each structure peaks.
        for i, structure in enumerate(structures):
            low, high = entry["published_peaks"][structure]
            ax.plot(
                [low, high],
                [i, i],
                color=STRUCTURE_COLORS[structure],
                linewidth=8,
                marker="o",
                markersize=12,
                solid_capstyle="round",
            )
            ax.text(high * 1.15, i, f"peak {low}" + (f"-{high}" if high != low else ""), va="center", fontsize=8)
        ax.set_yticks(range(len(structures)), [spec.structure_label(s) for s in structures])
        ax.set_ylim(-0.8, len(structures) - 0.2)
        origin = _published("the paper prints no numbers; bars mark where its text says each structure peaks")
    ax.set_xscale("log", base=2)
    ax.set_xticks(entry["n_ctx"], [str(n) for n in entry["n_ctx"]])
    ax.set_xlim(min(entry["n_ctx"]) / 1.5, max(entry["n_ctx"]) * 2.5)
    ax.set_xlabel("Number of document-context vectors n_ctx")
    if runs:
        ax.legend(fontsize=8)
    _title(fig, entry, origin)
    return fig, origin


def fig11_crossdoc_completeness(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    k = int(entry["k"])
    runs = view.available({label: spec.row_ref(entry, label) for label in entry["rows"]})
    fig = _figure(name)
    axes = np.atleast_1d(fig.subplots(1, len(spec.sources), sharey=True))
    if runs:
        splits = {label: run.completeness("cross_doc", "source", k) for label, run in runs.items()}
        for ax, source in zip(axes, spec.sources, strict=True):
            x = np.arange(len(runs))
            for level, offset, hatch in (("page", -0.2, None), ("document", 0.2, "..")):
                bottom = np.zeros(len(runs))
                for part in ("all", "partial", "none"):
                    heights = np.array(
                        [splits[label].get(source, {}).get(level, {}).get(part, np.nan) for label in runs]
                    )
                    ax.bar(
                        x + offset,
                        np.nan_to_num(heights),
                        0.38,
                        bottom=bottom,
                        color=SPLIT_COLORS[part],
                        hatch=hatch,
                        edgecolor="white",
                        label=f"{part} ({level}s)",
                    )
                    bottom += np.nan_to_num(heights)
            ax.set_xticks(x, list(runs), rotation=25, fontsize=7)
            ax.set_title(spec.source_label(source), fontsize=9)
        axes[0].set_ylabel(f"Cross-Doc queries (%), top {k}")
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=6, fontsize=7)
        origin = _reproduced(view, runs) + f"; pages solid, documents dotted; k = {k}"
    else:
        for ax, source in zip(axes, spec.sources, strict=True):
            _placeholder(ax, "The paper prints Figure 11\nwithout numbers")
            ax.set_title(spec.source_label(source), fontsize=9)
        origin = _published("none printed (figure only)")
    _title(fig, entry, origin)
    return fig, origin


def fig12_generators(name: str, entry: dict, spec: PaperSpec, view: ResultsView) -> tuple[Figure, str]:
    metric = entry["metric"]
    runs = view.available({label: spec.row_ref(entry, label) for label in entry["rows"]})
    points: dict[str, tuple[float, float, str]] = {}
    if runs:
        for label, run in runs.items():
            x = (run.aggregates({"generator": entry["x"]["generator"]}) or {}).get("macro", {}).get(metric)
            y = (run.aggregates({"generator": entry["y"]["generator"]}) or {}).get("macro", {}).get(metric)
            if x is not None and y is not None:
                points[label] = (x, y, run.retriever)
        origin = _reproduced(view, runs)
    else:
        # The tables name some configurations differently ("ColNomic (Ctx)" for the figure's
        # "ColNomic (Ctx512)"): match rows by the run they map to.
        published = []
        for axis in ("x", "y"):
            table = spec.tables[entry[axis]["table"]]
            csv = spec.csv(table["csv"])
            by_model = csv[csv["aggregate"] == "Macro"].set_index("model")[metric]
            published.append({spec.row_ref(table, model): float(value) for model, value in by_model.items()})
        for label in entry["rows"]:
            ref = spec.row_ref(entry, label)
            if ref in published[0] and ref in published[1]:
                points[label] = (published[0][ref], published[1][ref], ref.retriever)
        origin = _published(f"Tables 19 and 20 ({len(points)} of the figure's configurations)")
    fig = _figure(name)
    ax = fig.add_subplot()
    families = sorted({family for _, _, family in points.values()})
    colors = {family: f"C{i % 10}" for i, family in enumerate(families)}
    for label, (x, y, family) in points.items():
        ax.scatter(x, y, color=colors[family], s=30, zorder=3)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    values = [v for x, y, _ in points.values() for v in (x, y)]
    low, high = (min(values) - 5, max(values) + 5) if values else (0, 100)
    ax.plot([low, high], [low, high], linestyle="--", color="0.4", label="y = x")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal")
    ax.set_xlabel(f"Macro {metric_label(metric)} ({entry['x']['generator']} queries)")
    ax.set_ylabel(f"Macro {metric_label(metric)} ({entry['y']['generator']} queries)")
    for family in families:
        ax.scatter([], [], color=colors[family], label=family)
    ax.legend(fontsize=7, loc="lower right")
    if not points:
        _placeholder(ax, "no configuration with queries of both generators")
    _title(fig, entry, origin)
    return fig, origin


FIGURES: dict[str, Callable[..., tuple[Figure, str]]] = {
    "fig2_source_structure": fig2_source_structure,
    "fig5_domains": fig5_domains,
    "fig6_pages_per_document": fig6_pages_per_document,
    "fig7_evidence_types": fig7_evidence_types,
    "fig8_families": fig8_families,
    "fig9_domain_crossdoc": fig9_domain_crossdoc,
    "fig10_nctx": fig10_nctx,
    "fig11_crossdoc_completeness": fig11_crossdoc_completeness,
    "fig12_generators": fig12_generators,
}


def render_figure(name: str, spec: PaperSpec, view: ResultsView, out_dir: Path) -> FigureResult:
    if name not in FIGURES:
        raise KeyError(f"no drawing code for figure {name!r} (known: {sorted(FIGURES)})")
    fig, origin = FIGURES[name](name, spec.figures[name], spec, view)
    out_dir.mkdir(parents=True, exist_ok=True)
    pdf, png = out_dir / f"{name}.pdf", out_dir / f"{name}.png"
    fig.savefig(pdf, dpi=DPI)
    fig.savefig(png, dpi=DPI)
    return FigureResult(name, pdf, png, origin)


def render_figures(
    spec: PaperSpec, view: ResultsView, out_dir: Path, names: list[str] | None = None
) -> dict[str, FigureResult]:
    """The figures ``names`` (default: every figure of the manifest) as PDF and PNG in ``out_dir``."""
    ignore_generated(out_dir)
    return {name: render_figure(name, spec, view, out_dir) for name in (list(spec.figures) if names is None else names)}

# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Cross-document error analysis
#
# Why do Cross-Doc queries fail? For each run: are the evidence *documents* found but the wrong
# pages ranked (a page-level miss), or is a whole document missing (a document-level miss)? The
# paper's Figure 11 asks the same per source (Appendix B.9).
#
# Reads only the results store: `per_query.parquet` of each run (evidence pages and documents
# found at every k). The store and the benchmark come from `conf/report.yaml` with `OVERRIDES`,
# as in `per_structure_comparison.py`.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from vldocir.reporting.report_tasks import compose_report
from vldocir.reporting.store_view import ResultsView
from vldocir.store import list_runs

OVERRIDES = []  # as for `python -m vldocir.apps.report`, e.g. ["paths.results_dir=/scratch/r", "benchmark=vl-docir"]
cfg = compose_report(OVERRIDES)
RESULTS = Path(cfg.paths.results_dir)
index = list_runs(RESULTS)
assert len(index), f"no runs in {RESULTS / 'runs'}: make one with `python run.py`"
BENCHMARK = cfg.benchmark or index["benchmark"].value_counts().index[0]
view = ResultsView(RESULTS, BENCHMARK, ks=[5])  # one store entry per run: with k=5 where one has it, newest
print("store entries used:", *view.choices(), sep="\n  ")
runs = {run.label: run for run in view.runs()}
K = 5 if all(5 in run.ks for run in runs.values()) else min(next(iter(runs.values())).ks)
print(f"{len(runs)} run(s) of {BENCHMARK}; k = {K}")

# %% [markdown]
# ## All / partial / none, at page and document level, per source
#
# Computed with the harness's `evidence_completeness` on each source's Cross-Doc queries.

# %%
rows = []
for label, run in runs.items():
    for source, levels in run.completeness("cross_doc", "source", K).items():
        for level, split in levels.items():
            rows.append({"run": label, "source": source, "level": level, **split})
completeness = pd.DataFrame(rows).set_index(["run", "source", "level"]).sort_index()
display(completeness.round(1))

# %%
fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 3.5), squeeze=False)
colors = {"all": "#2ca02c", "partial": "#ffbf00", "none": "#d62728"}
for ax, label in zip(axes[0], runs, strict=True):
    part = completeness.loc[label].unstack("level")
    sources = list(part.index)
    for i, level in enumerate(("page", "document")):
        bottom = pd.Series(0.0, index=sources)
        for split in ("all", "partial", "none"):
            values = part[(split, level)]
            ax.bar(
                [x + 0.4 * i for x in range(len(sources))],
                values,
                0.38,
                bottom=bottom,
                color=colors[split],
                hatch=".." if level == "document" else None,
                label=f"{split} ({level})" if label == next(iter(runs)) else None,
            )
            bottom += values
    ax.set_xticks([x + 0.2 for x in range(len(sources))], sources)
    ax.set_title(f"{label}: Cross-Doc at {K} (pages solid, documents dotted)", fontsize=9)
    ax.set_ylabel("% of Cross-Doc queries")
axes[0][0].legend(fontsize=7, loc="lower left")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Where the unsolved Cross-Doc queries fail
#
# An unsolved query whose evidence documents are all in the top k lost a *page* (the right
# document, the wrong page); one with a document missing lost a *document*.


# %%
def failure_kinds(run) -> pd.Series:
    frame = run.per_query
    cross = frame[frame["evidence_structure"] == "cross_doc"]
    unsolved = cross[cross[f"recallall@{K}"] < 1]
    docs_complete = unsolved[f"docs_found@{K}"] == unsolved["n_evidence_docs"]
    return pd.Series(
        {
            "cross_doc queries": len(cross),
            "unsolved": len(unsolved),
            "page miss (all documents found)": int(docs_complete.sum()),
            "document miss": int((~docs_complete & (unsolved[f"docs_found@{K}"] > 0)).sum()),
            "no evidence document found": int((unsolved[f"docs_found@{K}"] == 0).sum()),
        }
    )


kinds = pd.DataFrame({label: failure_kinds(run) for label, run in runs.items()}).T
display(kinds)

# %% [markdown]
# ## Does a larger k help?
#
# Share of Cross-Doc queries with all evidence documents vs all evidence pages in the top k, for
# each evaluated k: the distance between the curves is what page ranking within the right
# documents still loses.

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
for label, run in runs.items():
    cross = run.per_query[run.per_query["evidence_structure"] == "cross_doc"]
    docs = [100 * (cross[f"docs_found@{k}"] == cross["n_evidence_docs"]).mean() for k in run.ks]
    pages = [100 * (cross[f"pages_found@{k}"] == cross["n_evidence_pages"]).mean() for k in run.ks]
    ax.plot(run.ks, docs, linestyle=":", marker="o", label=f"{label}: all documents")
    ax.plot(run.ks, pages, marker="o", label=f"{label}: all pages (RecallAll@k)")
ax.set_xlabel("k")
ax.set_ylabel("% of Cross-Doc queries")
ax.set_ylim(0, 100)
ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The worst unsolved Cross-Doc queries
#
# Lowest Recall@k first; open one in the failure viewer to see its pages:
# `python -m vldocir.reporting.viewer <run dir> --query <id>`.

# %%
for label, run in runs.items():
    cross = run.per_query[(run.per_query["evidence_structure"] == "cross_doc") & (run.per_query[f"recallall@{K}"] < 1)]
    worst = cross.sort_values([f"recall@{K}", "query_id"]).head(10)
    print(f"{label} ({run.path}):")
    display(
        worst[
            ["query_id", "source", "domain", "n_evidence_pages", f"pages_found@{K}", f"docs_found@{K}", f"recall@{K}"]
        ]
    )

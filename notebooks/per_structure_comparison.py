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
# # Per-structure comparison of the stored runs
#
# How does each run in the results store do on each evidence structure, and where does
# evidence-complete retrieval (RecallAll@k) fall behind page-level recall (Recall@k)?
#
# Reads only the results store (`results/runs/<benchmark>/<retriever>/<setting>/<entry>/metrics.json`),
# found as `python -m vldocir.apps.report` finds it: `conf/report.yaml` composed with `OVERRIDES` (the paths
# group, so `VLDOCIR_RESULTS_DIR` or `paths.results_dir=...` moves the store; `benchmark=...` picks
# the benchmark, default: the one with the most runs). Open with Jupyter (jupytext) or run as a script.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from vldocir.data.schema import EVIDENCE_STRUCTURES
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
print(f"{len(runs)} run(s) of {BENCHMARK} in {RESULTS}: {', '.join(runs)}; k = {K}")

# %% [markdown]
# ## RecallAll@k by evidence structure
#
# One row per run; the structures in the paper's order. Macro is the mean of the six columns.


# %%
def by_structure(metric: str) -> pd.DataFrame:
    rows = {}
    for label, run in runs.items():
        rows[label] = {s: run.structure(s, metric) for s in EVIDENCE_STRUCTURES}
    table = pd.DataFrame.from_dict(rows, orient="index")[list(EVIDENCE_STRUCTURES)].astype(float)
    table["Macro"] = table.mean(axis=1)
    return table


recall_all = by_structure(f"recallall@{K}")
display(recall_all.round(2))

# %%
ax = recall_all.drop(columns="Macro").T.plot.bar(figsize=(9, 4), rot=0)
ax.set_ylabel(f"RecallAll@{K} (%)")
ax.set_title(f"RecallAll@{K} by evidence structure ({BENCHMARK})")
ax.set_ylim(0, 100)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Page-level recall vs evidence-complete recall
#
# Recall@k credits every evidence page found; RecallAll@k only queries whose evidence is
# complete. The gap is the share of partly solved queries' credit, and it grows with the number of
# evidence pages: zero for single-page structures, largest for Cross-Doc.

# %%
gap = by_structure(f"recall@{K}") - recall_all
display(gap.round(2))

# %%
single_page = ["page_single", "page_multi"]
for label in runs:
    row = recall_all.loc[label]
    drop = row[single_page].mean() - row["cross_doc"]
    print(
        f"{label}: single-page RecallAll@{K} {row[single_page].mean():.1f}, Cross-Doc {row['cross_doc']:.1f} "
        f"(drop {drop:.1f} points); Recall@{K} - RecallAll@{K} on Cross-Doc: {gap.loc[label, 'cross_doc']:.1f}"
    )

# %% [markdown]
# ## RecallAll@k as k grows, per structure
#
# From every cut-off the runs were evaluated at (`eval.ks`).

# %%
fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.5), squeeze=False)
for ax, (label, run) in zip(axes[0], runs.items(), strict=True):
    for structure in EVIDENCE_STRUCTURES:
        ax.plot(run.ks, [run.structure(structure, f"recallall@{k}") for k in run.ks], marker="o", label=structure)
    ax.set_title(label)
    ax.set_xlabel("k")
    ax.set_ylabel("RecallAll@k (%)")
    ax.set_ylim(0, 100)
axes[0][-1].legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Source x structure
#
# RecallAll@k of each source x structure cell (the view of the paper's Table 16 / Figure 2).

# %%
for label, run in runs.items():
    cells = run.metrics["breakdowns"]["source_structure"]
    grid = pd.DataFrame(
        {
            source: {s: (cells[source].get(s) or {}).get(f"recallall@{K}") for s in EVIDENCE_STRUCTURES}
            for source in cells
        }
    ).T[list(EVIDENCE_STRUCTURES)]
    print(label)
    display(grid.astype(float).round(1))

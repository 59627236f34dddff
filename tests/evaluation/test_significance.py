"""Intervals and paired tests against independent oracles: the aggregates of ``summarise``, ranx's
Fisher randomization test, exact enumeration, statsmodels' corrections, scipy's paired t, and the
coverage of a seeded simulation with known means."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.evaluation.aggregate import summarise
from vldocir.evaluation.metrics import metric_columns
from vldocir.evaluation.significance import (
    AGGREGATES,
    QuerySetMismatch,
    aggregate_weights,
    align,
    bootstrap_intervals,
    correct,
    exact_randomization_p,
    minimum_detectable_difference,
    paired_tests,
    randomization_p,
)


def per_query(n: int = 240, seed: int = 0, sizes=(0.1, 0.2, 0.3, 0.4)) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "evidence_structure": rng.choice(EVIDENCE_STRUCTURES[: len(sizes)], n, p=sizes),
            "source": rng.choice(["arxiv", "sec", "wiki"], n),
            "domain": rng.choice(["finance", "science"], n),
            "in_run": True,
        }
    )
    for column in metric_columns([10]):
        frame[column] = rng.random(n).round(2)
    for found, total in (("pages_found", "n_evidence_pages"), ("docs_found", "n_evidence_docs")):
        frame[total] = 2
        frame[f"{found}@10"] = rng.integers(0, 3, n)
    return frame


def test_weights_reproduce_every_reported_aggregate():
    frame = per_query()
    summary = summarise(frame, [10])
    for aggregate in AGGREGATES:
        w = aggregate_weights(frame, aggregate)
        assert w.sum() == pytest.approx(1)
        for metric in metric_columns([10]):
            assert 100 * w @ frame[metric] == pytest.approx(summary["aggregates"][aggregate][metric], abs=1e-6)
    structure = EVIDENCE_STRUCTURES[1]
    w = aggregate_weights(frame, f"structure:{structure}")
    assert 100 * w @ frame["ndcg@10"] == pytest.approx(summary["breakdowns"]["structure"][structure]["ndcg@10"])


def test_intervals_hold_the_value_and_are_seeded():
    frame = per_query()
    table = bootstrap_intervals(frame, ["ndcg@10", "recall@10"], n_resamples=300, seed=3)
    assert set(AGGREGATES) <= set(table["aggregate"]) and "source:wiki" in set(table["aggregate"])
    assert "structure:page_single" in set(table["aggregate"]) and "domain:science" in set(table["aggregate"])
    assert (table["low"] <= table["value"]).all() and (table["value"] <= table["high"]).all()
    macro = table[(table["aggregate"] == "macro") & (table["metric"] == "ndcg@10")].iloc[0]
    assert macro["value"] == pytest.approx(summarise(frame, [10])["aggregates"]["macro"]["ndcg@10"], abs=1e-6)
    pd.testing.assert_frame_equal(table, bootstrap_intervals(frame, ["ndcg@10", "recall@10"], n_resamples=300, seed=3))
    assert set(bootstrap_intervals(frame, ["ndcg@10"], n_resamples=50, cells=False)["aggregate"]) == set(AGGREGATES) | {
        f"structure:{s}" for s in EVIDENCE_STRUCTURES[:4]
    }


def test_bootstrap_coverage_of_macro_and_micro():
    # Known truth, structures of unequal sizes. Macro's columns: per-query values normal around their
    # structure's mean, truth the mean of the structure means. Micro's columns: each query drawn from the
    # whole population (a structure at random, then its value), truth the population mean. Replications
    # are stacked as columns of one frame (the bootstrap draws the same indices for every column: one
    # product for all), 1500 each, so coverage is estimated within ~0.56% (1 SE); the tolerance 2% is 3.5 SE.
    rng = np.random.default_rng(7)
    sizes = {"page_single": 60, "page_multi": 120, "doc_near": 250, "cross_doc": 400}
    mu = np.array([0.7, 0.5, 0.4, 0.2])
    replications = 1500
    structures = np.repeat(list(sizes), list(sizes.values()))
    n = len(structures)
    frame = pd.DataFrame({"query_id": np.arange(n), "evidence_structure": structures, "source": "s", "domain": "d"})
    cell_mean = np.repeat(mu, list(sizes.values()))
    share = np.array(list(sizes.values())) / n
    macro = cell_mean[:, None] + rng.normal(0, 0.25, (n, replications))
    micro = mu[rng.choice(len(mu), (n, replications), p=share)] + rng.normal(0, 0.25, (n, replications))
    names = {"macro": [f"macro{i}" for i in range(replications)], "micro": [f"micro{i}" for i in range(replications)]}
    columns = pd.DataFrame(np.hstack([macro, micro]), columns=names["macro"] + names["micro"])
    frame = pd.concat([frame, columns], axis=1)
    table = bootstrap_intervals(frame, names["macro"] + names["micro"], n_resamples=1000, seed=1, cells=False)
    truth = {"macro": 100 * mu.mean(), "micro": 100 * share @ mu}
    for aggregate, value in truth.items():
        rows = table[(table["aggregate"] == aggregate) & table["metric"].isin(names[aggregate])]
        covered = ((rows["low"] <= value) & (value <= rows["high"])).mean()
        assert abs(covered - 0.95) <= 0.02, (aggregate, covered)


def test_exact_enumeration_by_hand_on_four_queries():
    # d = (0.1, 0.2, 0.3, 0.4), |sum| = 1.0; of the 16 patterns, only all-plus and all-minus reach 1.0,
    # and the flips of 0.1 give |0.8|... so p = 2/16.
    d, w = np.array([0.1, 0.2, 0.3, 0.4]), np.full(4, 0.25)
    assert exact_randomization_p(d, w) == pytest.approx(2 / 16)
    # with a tie: d = (0.5, 0.5, 0, 0): the zeros' flips do not change the sum: 8 of 16 patterns reach it
    assert exact_randomization_p(np.array([0.5, 0.5, 0, 0]), w) == pytest.approx(8 / 16)


def test_sampler_converges_to_the_exact_p_on_ten_queries():
    rng = np.random.default_rng(2)
    d = rng.normal(0.1, 0.2, 10).round(2)
    w = rng.random(10)
    w /= w.sum()
    exact = exact_randomization_p(d, w)
    permutations = 200_000
    sampled = randomization_p(d, w, n_permutations=permutations, seed=5)
    # binomial standard error at P permutations; 4 SE
    assert abs(sampled - exact) <= 4 * np.sqrt(exact * (1 - exact) / permutations) + 1 / permutations


def test_randomization_p_matches_ranx_fisher_on_micro():
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(4)
    n, docs = 60, 15
    qrels = ranx.Qrels({f"q{i}": {f"d{j}": 1 for j in rng.choice(docs, 3, replace=False)} for i in range(n)})

    def run(name, boost):
        scores = {}
        for i in range(n):
            relevant = qrels.qrels[f"q{i}"]
            scores[f"q{i}"] = {f"d{j}": float(rng.random() + boost * (f"d{j}" in relevant)) for j in range(docs)}
        return ranx.Run(scores, name=name)

    a, b = run("a", 0.03), run("b", 0.0)
    permutations = 10_000
    report = ranx.compare(qrels, [a, b], ["ndcg@10"], stat_test="fisher", n_permutations=permutations, random_seed=3)
    p_ranx = report.comparisons[("a", "b")]["ndcg@10"]["p_value"]
    # compare() keeps each run's per-query scores: the test sees exactly the values ranx tested
    xa, xb = (np.array([run.scores["ndcg@10"][f"q{i}"] for i in range(n)]) for run in (a, b))
    ours = randomization_p(xa - xb, np.full(n, 1 / n), n_permutations=permutations, seed=0)
    # ranx reports hits / P (ours (hits + 1) / (P + 1)): two independent estimates of one proportion,
    # each with binomial SE sqrt(p (1 - p) / P); 4 SE of their difference plus the 1/P of the conventions
    se = np.sqrt(2 * p_ranx * (1 - p_ranx) / permutations)
    assert 0.001 < p_ranx < 0.999, p_ranx
    assert abs(ours - p_ranx) <= 4 * se + 1 / permutations


def test_paired_tests_against_scipy_and_refusal_of_other_query_sets():
    a = per_query(seed=0)
    b = a.copy()
    rng = np.random.default_rng(9)
    for column in metric_columns([10]):
        b[column] = (a[column] - 0.05 + rng.normal(0, 0.1, len(a))).clip(0, 1)
    shuffled = b.sample(frac=1, random_state=1)
    table = paired_tests(a, shuffled, ["ndcg@10", "recall@10"], n_permutations=2000, seed=0)
    micro = table[(table["aggregate"] == "micro") & (table["metric"] == "ndcg@10")].iloc[0]
    t = stats.ttest_rel(a["ndcg@10"], b["ndcg@10"])
    assert micro["p_t"] == pytest.approx(t.pvalue, rel=1e-9)
    d = a["ndcg@10"] - b["ndcg@10"]
    assert micro["effect_size"] == pytest.approx(d.mean() / d.std(ddof=1))
    assert micro["difference"] == pytest.approx(100 * d.mean())
    assert micro["diff_low"] < micro["difference"] < micro["diff_high"]
    structure = EVIDENCE_STRUCTURES[2]
    cell = table[(table["aggregate"] == f"structure:{structure}") & (table["metric"] == "ndcg@10")].iloc[0]
    mine = (a["evidence_structure"] == structure).to_numpy()
    assert cell["p_t"] == pytest.approx(stats.ttest_rel(a["ndcg@10"][mine], b["ndcg@10"][mine]).pvalue, rel=1e-9)
    assert cell["n_queries"] == mine.sum()
    assert set(table["aggregate"]) == set(AGGREGATES) | {f"structure:{s}" for s in EVIDENCE_STRUCTURES[:4]}
    assert (table["p_randomization"] > 0).all() and (table["p_randomization"] <= 1).all()

    with pytest.raises(QuerySetMismatch, match="1 queries only in the first, 0 only in the second"):
        paired_tests(a, b.iloc[1:], ["ndcg@10"], n_permutations=10)
    _, _, alignment = align(a, b.iloc[1:], intersection=True)
    assert alignment == {"n_queries": len(a) - 1, "dropped_a": 1, "dropped_b": 0}


def test_identical_runs_are_never_significant():
    a = per_query(n=80)
    table = paired_tests(a, a, ["ndcg@10"], n_permutations=500)
    assert (table["p_randomization"] == 1).all() and (table["difference"] == 0).all()


@pytest.mark.parametrize(("method", "name"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_corrections_equal_statsmodels(method, name):
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(11)
    p = np.concatenate([rng.random(30) ** 3, [0.01, 0.01, 0.04, 1.0]])
    reject, adjusted = correct(p, method, alpha=0.05)
    expected_reject, expected_adjusted, _, _ = multipletests(p, alpha=0.05, method=name)
    np.testing.assert_array_equal(reject, expected_reject)
    np.testing.assert_allclose(adjusted, expected_adjusted, rtol=1e-12)


def test_minimum_detectable_difference_shrinks_with_queries():
    frame = per_query(n=400)
    table = minimum_detectable_difference(frame, "ndcg@10").set_index("aggregate")
    sizes = frame["evidence_structure"].value_counts()
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    s = EVIDENCE_STRUCTURES[0]
    assert table.loc[f"structure:{s}", "mdd"] == pytest.approx(
        z * 100 * frame.loc[frame["evidence_structure"] == s, "ndcg@10"].std() / np.sqrt(sizes[s])
    )
    assert table.loc["micro", "mdd"] < table.loc["macro", "mdd"] < table["mdd"].iloc[:4].max()


def test_macro_is_tested_as_macro():
    # 10 queries gain 0.45, 90 lose 0.05: Micro's difference is exactly 0, Macro's is 0.2
    structures = ["page_single"] * 10 + ["cross_doc"] * 90
    a = pd.DataFrame({"query_id": range(100), "evidence_structure": structures, "source": "s", "domain": "d"})
    a["ndcg@10"] = 0.5
    b = a.assign(**{"ndcg@10": np.where(np.arange(100) < 10, 0.05, 0.55)})
    table = paired_tests(a, b, ["ndcg@10"], n_permutations=2000, n_resamples=200).set_index("aggregate")
    assert table.loc["micro", "difference"] == pytest.approx(0) and table.loc["micro", "p_randomization"] == 1
    assert table.loc["macro", "difference"] == pytest.approx(20)
    assert table.loc["macro", "p_randomization"] < 0.01 and table.loc["macro", "p_t"] < 0.01


def test_exact_enumeration_refuses_more_than_twenty_queries():
    with pytest.raises(ValueError, match="n <= 20"):
        exact_randomization_p(np.ones(21), np.ones(21))


def test_a_cell_of_one_query_takes_the_pooled_variance():
    """Domain Macro over (domain, structure) cells where one cell holds a single query: the t-test and
    the effect size stay finite, computed by hand with that cell's variance pooled from the others."""
    a = per_query(n=60, seed=3)
    a.loc[0, "domain"] = "law"  # one query alone in its domain, so alone in its (domain, structure) cell
    b = a.copy()
    b["ndcg@10"] = (a["ndcg@10"] - np.random.default_rng(4).normal(0.05, 0.1, len(a))).clip(0, 1)
    row = paired_tests(a, b, ["ndcg@10"], n_permutations=100, n_resamples=0)
    row = row[row["aggregate"] == "domain_macro"].iloc[0]
    assert np.isfinite(row["p_t"]) and np.isfinite(row["effect_size"])

    d = (a["ndcg@10"] - b["ndcg@10"]).to_numpy()
    w = aggregate_weights(a, "domain_macro")
    groups = a.groupby(["domain", "evidence_structure"]).indices.values()
    sizes = np.array([len(i) for i in groups], float)
    weights = np.array([w[i].sum() for i in groups])
    var = np.array([d[i].var(ddof=1) if len(i) > 1 else np.nan for i in groups])
    dof = sizes - 1
    pooled = np.nansum(dof * var) / dof[sizes > 1].sum()
    var[sizes == 1], dof[sizes == 1] = pooled, dof[sizes > 1].sum()
    parts = weights**2 * var / sizes
    t = (w @ d) / np.sqrt(parts.sum())
    expected = 2 * stats.t.sf(abs(t), parts.sum() ** 2 / np.sum(parts**2 / dof))
    assert row["p_t"] == pytest.approx(expected, rel=1e-9)
    assert row["effect_size"] == pytest.approx((w @ d) / np.sqrt(weights @ var), rel=1e-9)


def test_intervals_cover_every_breakdown_cell_of_metrics_json():
    frame = per_query(n=120, seed=5)
    frame["evidence_type"] = np.random.default_rng(6).choice(["table", "text"], len(frame))
    breakdowns = summarise(frame, [10])["breakdowns"]
    table = bootstrap_intervals(frame, ["ndcg@10"], n_resamples=200).set_index("aggregate")["value"]
    expected = {
        f"source_structure:{g}/{s}": cells[s]["ndcg@10"]
        for g, cells in breakdowns["source_structure"].items()
        for s in cells
    }
    for by in ("source", "domain", "evidence_type"):
        expected |= {f"{by}:{g}": row["ndcg@10"] for g, row in breakdowns[by].items()}
    assert set(expected) <= set(table.index)
    for name, value in expected.items():
        assert table[name] == pytest.approx(value, abs=1e-5), name  # metrics.json keeps 6 decimals

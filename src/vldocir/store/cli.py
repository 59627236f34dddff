"""``python -m vldocir.store``: the store's index, its full check, and stored runs exported: as a TREC
run file, or as mteb result files (:mod:`vldocir.interop.mteb_results`).

    python -m vldocir.store [RESULTS_DIR] [--verify] [--cache-dir DIR]   # the index (--verify: hash everything)
    python -m vldocir.store export RUN OUT [--tag T] [--force] [--exact-scores] [--results-dir DIR]
    python -m vldocir.store export --format mteb RUN... OUTDIR [--force] [--results-dir DIR]

The store itself (entries, publishing, reading) is :mod:`vldocir.store`; this module only reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.compute as pc

from vldocir.data.runs import write_trec_run
from vldocir.errors import VldocirError
from vldocir.io import atomic_path, atomic_write_json, describe_os_error
from vldocir.store import Entry, StoreError, list_runs, read_stored_run, resolve_entry, unverified


def main(argv: list[str] | None = None) -> int:
    """``python -m vldocir.store [RESULTS_DIR] [--verify]``: the index of the store.
    ``python -m vldocir.store export [--format trec|mteb] RUN... OUT``: stored runs as a TREC run file or
    mteb result files (:func:`export_main`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["export"]:
        return export_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m vldocir.store", description=main.__doc__)
    parser.add_argument("results_dir", nargs="?", default=os.environ.get("VLDOCIR_RESULTS_DIR", "results"))
    parser.add_argument(
        "--verify", action="store_true", help="also hash every run.parquet and list what does not verify"
    )
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get("VLDOCIR_CACHE_DIR", "cache"),
        help="the artifact cache --verify also checks in full (default: $VLDOCIR_CACHE_DIR or cache)",
    )
    args = parser.parse_args(argv)
    index = list_runs(args.results_dir)
    if index.empty:
        print(f"no entries in {Path(args.results_dir, 'runs')}")
    else:
        shown = index.assign(ks=index.ks.map(lambda ks: ",".join(map(str, ks))), path=index.path.map(lambda p: p.name))
        print(shown.drop(columns=["fingerprint"]).to_string(index=False))
    if args.verify:
        bad = unverified(args.results_dir)
        for path, problems in bad:
            print(f"UNVERIFIED {path}: {'; '.join(problems)}", file=sys.stderr)
        damaged = damaged_cache(args.cache_dir)
        for _, problem in damaged:
            print(f"DAMAGED {problem}", file=sys.stderr)
        return 1 if bad or damaged else 0
    return 0


def damaged_cache(cache_dir: str | Path) -> list[tuple[Path, str]]:
    """Every damaged artifact under ``cache_dir``, checked in full (:func:`vldocir.cache.damaged_artifacts`,
    with the page-embedding stores' and rerank score caches' own checks): (its directory, what is wrong)."""
    from vldocir.cache import damaged_artifacts
    from vldocir.retrieval.embeddings import store_problems
    from vldocir.retrieval.rerank import SCORES_KIND, score_cache_problems

    checkers = {"page-embeddings": store_problems, SCORES_KIND: score_cache_problems}
    return damaged_artifacts(Path(cache_dir), "full", checkers)


# -- export ----------------------------------------------------------------------------------------


def export_trec(
    entry: Entry, out: str | Path, tag: str | None = None, force: bool = False, exact_scores: bool = False
) -> dict[str, Any]:
    """Write the entry's run as a TREC run file ``out`` (atomically; an existing file only with
    ``force``, and never inside the store's ``runs/``). ``tag`` defaults to ``<retriever>.<setting>``.

    trec_eval reads scores as float32 and breaks ties by docid descending, vldocir by page_id
    ascending; so tied pages get scores one float32 step apart in vldocir's order
    (:func:`vldocir.data.runs.trec_scores`) and trec_eval evaluates every query as the entry's
    ``per_query.parquet`` says. ``exact_scores`` writes the stored scores unchanged instead
    (trec_eval then orders ties its own way).
    """
    out = Path(out)
    _refuse_store_target(entry, out)
    if out.exists() and not force:
        raise StoreError(f"{out} exists; pass --force to replace it")
    tag = tag or f"{entry.path.parents[1].name}.{entry.path.parent.name}"
    run = read_stored_run(entry)
    counts = write_trec_run(run, out, tag, separate_ties=not exact_scores)
    return {
        "entry": str(entry.path),
        "out": str(out),
        "tag": tag,
        "queries": len(pc.unique(run.column("query_id"))),
        **counts,
    }


def _refuse_store_target(entry: Entry, out: Path) -> None:
    runs_root = entry.path.resolve().parents[3]
    if out.resolve().is_relative_to(runs_root):
        raise StoreError(
            f"{out} is inside the results store {runs_root}, whose directories are never written into; export elsewhere"
        )


def mteb_export(entry: Entry, out: Path):
    """The entry's scores as mteb's ``TaskResult`` (:mod:`vldocir.interop.mteb_results`): the benchmark
    reloaded from where the run read it (the manifest's ``benchmark.root``; its fingerprint must be the
    entry's), the stored run, per-query rows and ``metrics.json``. Returns (target path, TaskResult,
    (model, revision))."""
    from vldocir.data.benchmark import load_benchmark
    from vldocir.evaluation.protocol import Protocol
    from vldocir.interop import mteb_results as mr

    _refuse_store_target(entry, out)
    manifest = entry.manifest
    config = manifest.get("config") or {}
    dataset = config.get("dataset") or {}
    root = (manifest.get("benchmark") or {}).get("root")  # the directory the run read (a reduced or hub one too)
    if not root:
        raise StoreError(f"{entry.path}: its manifest records no benchmark.root to reload the benchmark from")
    protocol = Protocol.from_config(dataset.get("protocol"))
    bench = load_benchmark(root)
    recorded = (manifest.get("benchmark") or {}).get("fingerprint")
    if bench.fingerprint != recorded:
        raise StoreError(
            f"the benchmark at {root} has fingerprint {bench.fingerprint}, the entry {entry.path.name} "
            f"was evaluated on {recorded}: it changed since (re-run the evaluation)"
        )
    columns = ["query_id", *([protocol.subsets] if protocol is not None and protocol.subsets else [])]
    queries = bench.arrow("queries", columns).to_pandas()
    qrels = bench.arrow("qrels", ["query_id", "page_id", "grade"]).to_pandas()
    qrels["grade"] = qrels["grade"].fillna(1).astype(int)
    ks = tuple(int(k) for k in entry.record["ks"])
    stored = mr.StoredEvaluation(
        run=read_stored_run(entry, ["query_id", "page_id", "score"]),
        per_query=pd.read_parquet(entry.path / "per_query.parquet"),
        metrics=json.loads((entry.path / "metrics.json").read_text()),
        ks=ks,
    )
    subsets = mr.subset_values(queries, protocol)
    split = str((dataset.get("importer") or {}).get("split") or "test")
    task = mr.resolve_task(protocol, bench.name, list(subsets), split, ks)
    entries = mr.task_scores(stored, qrels, subsets, task, protocol)
    revision = (dataset.get("importer") or {}).get("revision") or f"vldocir-fingerprint-{bench.fingerprint}"
    encoder = (manifest.get("retrieval") or {}).get("encoder")
    model = mr.model_identity(config, entry.run_key or entry.path.name, encoder if isinstance(encoder, dict) else None)
    result = mr.task_result(
        task, entries, str(revision), (manifest.get("timings") or {}).get("wall_s"), entry.record.get("created_at")
    )
    return mr.result_path(out, model, task.name), result, model


def export_mteb(runs: list[str], out: str | Path, results_dir: str | Path, force: bool = False) -> list[dict]:
    """Every run of ``runs`` as an mteb result file under ``out`` (:func:`mteb_export`); all are
    computed and checked before the first is written (a refusal writes nothing), each written atomically."""
    from vldocir.interop.mteb_results import model_meta

    out = Path(out)
    done, targets = [], {}
    for run in runs:
        entry, how = resolve_entry(run, results_dir)
        target, result, model = mteb_export(entry, out)
        if target in targets:
            raise StoreError(f"{run} and {targets[target]} would both be written to {target}; export them apart")
        if target.exists() and not force:
            raise StoreError(f"{target} exists; pass --force to replace it")
        targets[target] = run
        done.append({"entry": entry, "how": how, "target": target, "result": result, "model": model})
    for item in done:
        with atomic_path(item["target"]) as tmp:
            item["result"].to_disk(tmp)
        meta = item["target"].parent / "model_meta.json"
        if not meta.exists():  # an mteb cache's own (fuller) model_meta.json is kept
            atomic_write_json(model_meta(item["model"]), meta)
    return done


def export_main(argv: list[str]) -> int:
    """``python -m vldocir.store export [--format trec|mteb] RUN... OUT [--force] [--results-dir DIR]``.

    ``--format trec`` (the default): one RUN as a TREC run file OUT (``qid Q0 docid rank score tag``;
    ``--tag``, ``--exact-scores``). ``--format mteb``: each RUN as an mteb result file,
    ``OUT/results/<model>/<revision>/<Task>.json`` with ``model_meta.json`` (mteb's ``ResultCache``
    layout: ``mteb.ResultCache(OUT).load_results(...)`` reads it); see docs/interop.md.

    RUN is an entry directory, a ``runs/<benchmark>/<retriever>/<setting>`` directory (its newest
    entry), or ``<benchmark>/<retriever>/<setting>`` within the store (``--results-dir``, default
    ``$VLDOCIR_RESULTS_DIR`` or ``results``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m vldocir.store export",
        description=export_main.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="RUN... OUT", help="run(s), then the file (trec) or folder (mteb)")
    parser.add_argument("--format", choices=("trec", "mteb"), default="trec", help="trec (default) | mteb")
    parser.add_argument("--tag", default=None, help="trec: the run tag (6th column); default <retriever>.<setting>")
    parser.add_argument("--force", action="store_true", help="replace what exists at OUT")
    parser.add_argument(
        "--exact-scores",
        action="store_true",
        help="trec: write the stored scores unchanged (trec_eval then breaks ties by docid descending)",
    )
    parser.add_argument("--results-dir", default=os.environ.get("VLDOCIR_RESULTS_DIR", "results"))
    args = parser.parse_args(argv)
    if len(args.paths) < 2 or (args.format == "trec" and len(args.paths) != 2):
        takes = "one RUN" if args.format == "trec" else "RUN..."
        print(f"export: --format {args.format} takes {takes} then OUT", file=sys.stderr)
        return 2
    *runs, out = args.paths
    if args.format == "mteb":
        try:
            done = export_mteb(runs, out, args.results_dir, args.force)
        except (VldocirError, ValueError, OSError) as error:
            print(f"export: {describe_os_error(error) if isinstance(error, OSError) else error}", file=sys.stderr)
            return 2
        for item in done:
            result = item["result"]
            print(
                f"Exported {item['entry'].path} ({item['how']}) as mteb {result.task_name} "
                f"({', '.join(result.hf_subsets)}; main score {result.main_score:.5f}) to {item['target']}"
            )
        return 0
    try:
        entry, how = resolve_entry(runs[0], args.results_dir)
        done = export_trec(entry, out, args.tag, args.force, args.exact_scores)
    except (StoreError, ValueError) as error:
        print(f"export: {error}", file=sys.stderr)
        return 2
    print(
        f"Exported {done['rows']} rows ({done['queries']} queries) of {entry.path} ({how}) to {done['out']}, "
        f"tag {done['tag']}"
    )
    if done["lowered"]:
        print(
            f"  {done['lowered']} score(s) lowered by float32 steps to order tied pages as vldocir does "
            "(page_id ascending; trec_eval would order them by docid descending); --exact-scores keeps them"
        )
    if done["ties_left"]:
        print(f"  {done['ties_left']} pair(s) of tied pages left tied: trec_eval orders them by docid descending")
    return 0

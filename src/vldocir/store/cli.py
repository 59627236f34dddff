"""``python -m vldocir.store``: the store's index, its full check, and a stored run as a TREC run file.

    python -m vldocir.store [RESULTS_DIR] [--verify] [--cache-dir DIR]   # the index (--verify: hash everything)
    python -m vldocir.store export RUN OUT [--tag T] [--force] [--exact-scores] [--results-dir DIR]

The store itself (entries, publishing, reading) is :mod:`vldocir.store`; this module only reads it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from vldocir.data.runs import write_trec_run
from vldocir.store import Entry, StoreError, list_runs, read_stored_run, resolve_entry, unverified


def main(argv: list[str] | None = None) -> int:
    """``python -m vldocir.store [RESULTS_DIR] [--verify]``: the index of the store.
    ``python -m vldocir.store export RUN OUT [--tag T]``: a stored run as a TREC run file (:func:`export_main`)."""
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
    runs_root = entry.path.resolve().parents[3]
    if out.resolve().is_relative_to(runs_root):
        raise StoreError(
            f"{out} is inside the results store {runs_root}, whose directories are never written into; export elsewhere"
        )
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


def export_main(argv: list[str]) -> int:
    """``python -m vldocir.store export RUN OUT [--tag T] [--force] [--exact-scores] [--results-dir DIR]``:
    write a stored run as a TREC run file (``qid Q0 docid rank score tag``).

    RUN is an entry directory, a ``runs/<benchmark>/<retriever>/<setting>`` directory (its newest
    entry), or ``<benchmark>/<retriever>/<setting>`` within the store (``--results-dir``, default
    ``$VLDOCIR_RESULTS_DIR`` or ``results``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m vldocir.store export",
        description=export_main.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", help="entry directory, setting directory, or <benchmark>/<retriever>/<setting>")
    parser.add_argument("out", help="the TREC run file to write")
    parser.add_argument("--tag", default=None, help="the run tag (6th column); default <retriever>.<setting>")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    parser.add_argument(
        "--exact-scores",
        action="store_true",
        help="write the stored scores unchanged (trec_eval then breaks ties by docid descending)",
    )
    parser.add_argument("--results-dir", default=os.environ.get("VLDOCIR_RESULTS_DIR", "results"))
    args = parser.parse_args(argv)
    try:
        entry, how = resolve_entry(args.run, args.results_dir)
        done = export_trec(entry, args.out, args.tag, args.force, args.exact_scores)
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

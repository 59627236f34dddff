"""What document-context scoring (setting=ctx) and hierarchical retrieval (setting=hierarchical) cost
next to exhaustive exact search, and what hierarchical retrieval gives up.

    .venv/bin/python perf/bench_settings.py                 # 100,000 pages + the mini: about 12 minutes here
    .venv/bin/python perf/bench_settings.py --quick         # 5,000 pages, 64 queries: about 1 minute
    .venv/bin/python perf/bench_settings.py --smoke --skip-mini   # 2,000 pages, 20 queries: seconds
    make bench-settings ARGS="--pages 200000 --out settings.json"

Part A, random embeddings with document structure, all in one process. ``--pages`` pages (default
100,000) of ``--page-tokens`` token vectors (default 64; the real ColQwen2.5 page has up to 768) of
``--dim`` (128) dimensions, in documents of 1 to 25 pages (13 on average; the paper has 388,548
pages in 29,641 documents, 13.1 a document), written as fp16 shards of 1,024 pages (vectors.npy +
offsets.npy, as the page-embedding store holds them) and memory-mapped back. Each document has a
few topic directions; a page token is a topic of its document plus noise; a query is
``--query-tokens`` noisy tokens of one random page (its source page), so rankings are not random
and the top-10 overlap below means something. It times:

1. the builds, apart from any search: context vectors for each ``--n-ctx`` (spherical k-means per
   document with :func:`vldocir.retrieval.context.spherical_kmeans`, the pipeline's per-document
   loop in one process with faiss on one thread, stored as fp16) and
   :func:`~vldocir.retrieval.hierarchical.pooled_page_vectors`;
2. **base** (:func:`vldocir.retrieval.search.exact_search`, top-``--depth``) and **ctx** for each
   ``--n-ctx`` (``exact_search(..., context=DocumentContextVectors.for_shard)``), interleaved: the
   shards are cut into ``--groups`` groups and each group runs every contender back to back
   (exact search is decomposable by pages; the per-group top-N are merged into the full one), so
   a change of machine load hits them alike; the ratio is the median over groups;
3. **hierarchical** for ``doc_vectors`` context (each ``--n-ctx``) and pooled, and each
   ``--top-docs``: :func:`~vldocir.retrieval.hierarchical.hierarchical_search` (both stages), and
   its stage 1 alone (exact search over the document vectors). Not decomposable by pages, so each
   run sits between two brackets, base on one group of shards scaled to all pages, whose mean is
   the base time of that moment. Also the fraction of the exhaustive page scores computed and
   the overlap of its top-10 with base's.

"arith." is the ratio of multiply-adds to base's (page tokens vs context or pooled vectors scored),
at the measured page length and projected to 768 tokens a page: the part of the cost that scales.

Part B, the shipped mini (data/vl-docir-mini: 312 pages, 24 documents, 142 queries) through the real
pipeline (compose + ``run_stage``, as tests/helpers.py ``evaluate`` does) with the tiny random
ColQwen2.5 checkpoint of tests/tiny_models.py built offline in a temporary directory: base, then
``setting=hierarchical`` for each ``--mini-top-docs`` and both doc_vectors; the manifest's
``retrieval.hierarchical.page_score_fraction`` and the Macro RecallAll@10 change vs base. A random
tiny model ranks almost at random: Part B checks the machinery and the fraction, not quality.
Cache, results and logs go to a temporary directory, never the repository's.

Torch runs on one thread by default (``--threads 0``: torch's choice): on a shared 2-core machine
two intra-op threads stall on every parallel op whenever the other is descheduled (exact search
4-5x slower than on one thread, hierarchical search up to 30x; see perf/README.md).

This is a script, not a timed test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
PAPER_PAGES, PAPER_DOCS = 388_548, 29_641
REAL_PAGE_TOKENS = 768  # ColQwen2.5 at max_num_visual_tokens=768 on the paper's 2000x4000 pages
TOPICS_PER_DOC = 8
OVERLAP_K = 10


def log(message: str = "") -> None:
    print(message, flush=True)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


# --------------------------------------------------------------------------------------------
# Part A: random embeddings with document structure
# --------------------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_corpus(args, root: Path) -> dict:
    """Write the fp16 shards under ``root`` and return the corpus' layout and queries.

    Returns ``doc_of_page`` (n_pages,) int64, ``shard_dirs``, the queries as a fp32
    :class:`RaggedVectors` and each query's ``source`` page (n_queries,) int64.
    """
    from vldocir.retrieval.embeddings import write_ragged
    from vldocir.retrieval.vectors import RaggedVectors

    rng = np.random.default_rng(args.seed)
    sizes = rng.integers(1, 2 * args.pages_per_doc, size=args.pages)  # mean pages_per_doc
    n_docs = int(np.searchsorted(np.cumsum(sizes), args.pages)) + 1
    sizes = sizes[:n_docs]
    sizes[-1] -= int(sizes.sum()) - args.pages
    doc_of_page = np.repeat(np.arange(n_docs), sizes)
    topics = _unit(rng.standard_normal((n_docs, TOPICS_PER_DOC, args.dim), dtype=np.float32))
    source = np.sort(rng.choice(args.pages, size=args.queries, replace=args.queries > args.pages))
    query_items = []
    shard_dirs = []
    T, noise = args.page_tokens, 1.0 / np.sqrt(args.dim)
    for shard, start in enumerate(range(0, args.pages, args.shard_size)):
        n = min(args.shard_size, args.pages - start)
        docs = np.repeat(doc_of_page[start : start + n], T)
        which = rng.integers(0, TOPICS_PER_DOC, size=n * T)
        tokens = topics[docs, which] + noise * rng.standard_normal((n * T, args.dim), dtype=np.float32)
        tokens = _unit(tokens).reshape(n, T, args.dim)
        for page in source[(source >= start) & (source < start + n)]:
            picked = tokens[page - start, rng.choice(T, size=args.query_tokens, replace=args.query_tokens > T)]
            query_items.append(_unit(picked + noise * rng.standard_normal(picked.shape, dtype=np.float32)))
        directory = root / f"{shard:05d}"
        directory.mkdir(parents=True)
        write_ragged(directory, list(tokens), "float16", {})
        shard_dirs.append(directory)
    return {
        "doc_of_page": doc_of_page,
        "shard_dirs": shard_dirs,
        "queries": RaggedVectors.from_list(query_items),
        "source": source,
        "n_docs": n_docs,
    }


def open_shards(corpus: dict, shard_size: int) -> list:
    """The shards memory-mapped, each placed by ``first_index`` (opening them is cheap)."""
    from vldocir.retrieval.embeddings import read_ragged

    return [read_ragged(d, first_index=i * shard_size) for i, d in enumerate(corpus["shard_dirs"])]


def build_context(shards: list, doc_of_page: np.ndarray, n_docs: int, n_ctx: int, iterations: int) -> list[np.ndarray]:
    """Each document's (min(n_ctx, its tokens), dim) spherical k-means centroids, by the pipeline's
    per-document loop (vldocir.retrieval.context._cluster_chunk, without checksums, chunks and cache)."""
    from vldocir.retrieval.context import spherical_kmeans

    first_of_shard = np.array([s.first_index for s in shards])
    pages_of_doc = np.split(
        np.argsort(doc_of_page, kind="stable"), np.cumsum(np.bincount(doc_of_page, minlength=n_docs))[:-1]
    )
    contexts = []
    for doc in range(n_docs):
        pages = pages_of_doc[doc]
        in_shard = np.searchsorted(first_of_shard, pages, side="right") - 1
        tokens = np.concatenate(
            [shards[s].subset(pages[in_shard == s] - shards[s].first_index).fp32().numpy() for s in np.unique(in_shard)]
        )
        contexts.append(spherical_kmeans(tokens, n_ctx, iterations, 0))
    return contexts


def _overlap(top, base, k: int = OVERLAP_K) -> float:
    """Mean over queries of |top-k ∩ base top-k| / k."""
    a, b = top.indices[:, :k], base.indices[:, :k]
    return float(np.mean([len(set(x[x >= 0]) & set(y[y >= 0])) / k for x, y in zip(a, b, strict=True)]))


def _source_at(top, source: np.ndarray, k: int = OVERLAP_K) -> float:
    return float((top.indices[:, :k] == source[:, None]).any(axis=1).mean())


def _arith_context(doc_of_page: np.ndarray, shard_size: int, n_ctx: int, page_tokens: int) -> int:
    """Context vectors ctx search scores per query: each shard scores the vectors of its documents."""
    total = 0
    pages_per_doc = np.bincount(doc_of_page)
    for start in range(0, len(doc_of_page), shard_size):
        docs = np.unique(doc_of_page[start : start + shard_size])
        total += int(np.minimum(n_ctx, pages_per_doc[docs] * page_tokens).sum())
    return total


def _merge_tops(tops: list, depth: int):
    """The top ``depth`` of exact searches over consecutive shard groups, as one search over all of
    them returns it (score descending, ties by item index)."""
    from vldocir.retrieval.search import TopN

    indices = np.concatenate([t.indices for t in tops], axis=1)
    scores = np.concatenate([t.scores for t in tops], axis=1)
    valid = indices >= 0
    order = np.lexsort((np.where(valid, indices, np.iinfo(np.int64).max), -np.where(valid, scores, -np.inf)), axis=1)
    order = order[:, :depth]
    return TopN(np.take_along_axis(indices, order, 1), np.take_along_axis(scores, order, 1))


def _clock(fn):
    """(result, wall seconds, CPU seconds of this process, all threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def part_a(args) -> dict:
    import warnings

    import faiss
    import torch

    from vldocir.retrieval.context import DocumentContextVectors
    from vldocir.retrieval.embeddings import read_ragged, write_ragged
    from vldocir.retrieval.hierarchical import hierarchical_search, pooled_page_vectors
    from vldocir.retrieval.search import exact_search

    # torch.from_numpy on a read-only memory map (pooled_page_vectors reads whole shards): only read here
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    search_kw = dict(
        query_batch_size=args.query_batch_size,
        page_block_tokens=args.page_block_tokens,
        device=args.device,
        progress=False,
    )
    out: dict = {
        "config": {
            k: getattr(args, k)
            for k in (
                "pages",
                "page_tokens",
                "dim",
                "pages_per_doc",
                "queries",
                "query_tokens",
                "shard_size",
                "depth",
                "n_ctx",
                "top_docs",
                "kmeans_iterations",
                "groups",
                "device",
                "seed",
            )
        },
        "torch_threads": torch.get_num_threads(),
        "faiss_threads": faiss.omp_get_max_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
    }
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-settings-") as tmp:
        tick = time.perf_counter()
        corpus = make_corpus(args, Path(tmp) / "pages")
        doc_of_page, n_docs, queries, source = (
            corpus["doc_of_page"],
            corpus["n_docs"],
            corpus["queries"],
            corpus["source"],
        )
        P, T = args.pages, args.page_tokens
        log(
            f"Part A: {P:,} pages x {T} tokens x {args.dim} dims in {n_docs:,} documents "
            f"({P / n_docs:.1f} pages each), fp16 shards of {args.shard_size}; {len(queries)} queries x "
            f"{args.query_tokens} tokens, top-{args.depth}; device {args.device}, torch {torch.get_num_threads()} "
            f"threads, faiss {faiss.omp_get_max_threads()} threads, {os.cpu_count()} CPUs"
        )
        log(
            f"  wrote the corpus in {time.perf_counter() - tick:.1f} s "
            f"({sum((d / 'vectors.npy').stat().st_size for d in corpus['shard_dirs']) / 1e9:.2f} GB fp16)"
        )
        out["n_docs"] = n_docs
        shards = open_shards(corpus, args.shard_size)
        groups = [g for g in np.array_split(np.arange(len(shards)), min(args.groups, len(shards))) if len(g)]
        group_pages = [sum(len(shards[i]) for i in g) for g in groups]
        exact_search(queries, shards[:1], args.depth, **search_kw)  # warm-up: first-call costs

        # --- builds, timed apart from any search: context vectors (k-means per document), pooled vectors ---
        contexts: dict[int, DocumentContextVectors] = {}
        builds: dict[int, dict] = {}
        for n_ctx in args.n_ctx:
            # as the pipeline clusters documents (context._cluster_chunk with workers=1): faiss on one thread
            default_threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                built, build_s, _ = _clock(
                    lambda n_ctx=n_ctx: build_context(shards, doc_of_page, n_docs, n_ctx, args.kmeans_iterations)
                )
            finally:
                faiss.omp_set_num_threads(default_threads)
            directory = Path(tmp) / f"context-{n_ctx}"
            directory.mkdir()
            write_ragged(directory, built, "float16", {})  # stored in the page store's dtype, as the pipeline does
            contexts[n_ctx] = DocumentContextVectors(
                read_ragged(directory), [str(d) for d in range(n_docs)], doc_of_page
            )
            builds[n_ctx] = {"build_s": build_s, "build_ms_per_doc": 1e3 * build_s / n_docs}
            log(
                f"  context vectors n_ctx={n_ctx}: k-means {build_s:.1f} s for {n_docs:,} documents "
                f"({1e3 * build_s / n_docs:.2f} ms/doc, one process, faiss on one thread)"
            )
        pooled, pooled_s, _ = _clock(
            lambda: pooled_page_vectors(open_shards(corpus, args.shard_size), doc_of_page, n_docs)
        )
        log(f"  pooled page vectors: {pooled_s:.1f} s")

        # --- base and ctx, interleaved over groups of shards (exact search is decomposable by pages): each
        # group runs every contender back to back, so a change of machine load hits them alike ---
        contenders = [("base", None)] + [(f"ctx n_ctx={n}", contexts[n].for_shard) for n in args.n_ctx]
        per_group: dict[str, list] = {name: [] for name, _ in contenders}
        parts: dict[str, list] = {name: [] for name, _ in contenders}
        for g, members in enumerate(groups):
            for name, context in contenders[g % len(contenders) :] + contenders[: g % len(contenders)]:
                top, wall, cpu = _clock(
                    lambda members=members, context=context: exact_search(
                        queries, [shards[i] for i in members], args.depth, context=context, **search_kw
                    )
                )
                per_group[name].append((wall, cpu))
                parts[name].append(top)
            log(
                f"  group {g + 1}/{len(groups)} ({group_pages[g]:,} pages): "
                + ", ".join(f"{name} {per_group[name][-1][0]:.1f} s" for name, _ in contenders)
            )
        tops = {name: _merge_tops(parts[name], args.depth) for name in parts}
        base = tops["base"]
        base_walls = np.array([w for w, _ in per_group["base"]])
        base_cpus = np.array([c for _, c in per_group["base"]])
        page_tokens_scored = P * T
        for n_ctx in args.n_ctx:
            name = f"ctx n_ctx={n_ctx}"
            walls = np.array([w for w, _ in per_group[name]])
            cpus = np.array([c for _, c in per_group[name]])
            ratios = walls / base_walls
            rows.append(
                {
                    "setting": name,
                    "kind": "ctx",
                    "n_ctx": n_ctx,
                    **builds[n_ctx],
                    "search_s": float(walls.sum()),
                    "cpu_s": float(cpus.sum()),
                    "ratio": float(np.median(ratios)),
                    "ratio_range": [float(ratios.min()), float(ratios.max())],
                    "ratio_total": float(walls.sum() / base_walls.sum()),
                    "cpu_ratio": float(cpus.sum() / base_cpus.sum()),
                    "stage1_ratio": None,
                    "page_score_fraction": 1.0,
                    "overlap@10": _overlap(tops[name], base),
                    "source@10": _source_at(tops[name], source),
                    "arith": 1 + _arith_context(doc_of_page, args.shard_size, n_ctx, T) / page_tokens_scored,
                    "arith_768": 1
                    + _arith_context(doc_of_page, args.shard_size, n_ctx, REAL_PAGE_TOKENS) / (P * REAL_PAGE_TOKENS),
                }
            )

        # --- hierarchical: not decomposable by pages (stage 1 ranks every document), so each run sits between
        # two "brackets", base on one group of shards scaled to all pages, which give the base time of that moment ---
        bracket_count = [0]

        def bracket() -> tuple[float, float]:
            g = bracket_count[0] % len(groups)
            bracket_count[0] += 1
            _, wall, cpu = _clock(
                lambda: exact_search(queries, [shards[i] for i in groups[g]], args.depth, **search_kw)
            )
            return wall * P / group_pages[g], cpu * P / group_pages[g]

        def bracketed(fn, before):
            result, wall, cpu = _clock(fn)
            after = bracket()
            base_wall, base_cpu = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
            return result, wall, cpu, base_wall, base_cpu, after, sorted([wall / before[0], wall / after[0]])

        brackets = [bracket()]
        doc_sets = [(f"context n{n}", contexts[n].vectors, None) for n in args.n_ctx] + [("pooled", pooled, pooled_s)]
        for name, doc_vectors, build_s in doc_sets:
            n_doc_vectors = int(doc_vectors.offsets[-1])
            # stage 1 alone (hierarchical_search's first call), to split its time from stage 2's
            _, stage1_s, _, stage1_base, _, after, _ = bracketed(
                lambda doc_vectors=doc_vectors: exact_search(
                    queries, [doc_vectors], min(max(args.top_docs), n_docs), **search_kw
                ),
                brackets[-1],
            )
            brackets.append(after)
            for top_docs in args.top_docs:
                stats: dict = {}
                top, wall, cpu, base_wall, base_cpu, after, spread = bracketed(
                    lambda doc_vectors=doc_vectors, top_docs=top_docs, stats=stats: hierarchical_search(
                        queries,
                        doc_vectors,
                        doc_of_page,
                        open_shards(corpus, args.shard_size),
                        args.depth,
                        top_docs,
                        n_items=P,
                        stats=stats,
                        **search_kw,
                    ),
                    brackets[-1],
                )
                brackets.append(after)
                fraction = stats["page_scores"] / stats["exhaustive_page_scores"]
                log(
                    f"  hierarchical {name}, top {top_docs} docs: {wall:.1f} s (base at the time: {base_wall:.0f} s), "
                    f"{fraction:.4%} of page scores"
                )
                rows.append(
                    {
                        "setting": f"hier {name} top{top_docs}",
                        "kind": "hierarchical",
                        "doc_vectors": name,
                        "top_docs": top_docs,
                        "build_s": build_s,
                        "search_s": wall,
                        "cpu_s": cpu,
                        "adjacent_base_s": base_wall,
                        "ratio": wall / base_wall,
                        "ratio_range": spread,
                        "cpu_ratio": cpu / base_cpu,
                        "stage1_s": stage1_s,
                        "stage1_ratio": stage1_s / stage1_base,
                        "page_score_fraction": fraction,
                        "page_scores": stats["page_scores"],
                        "doc_vectors_per_query": n_doc_vectors,
                        "overlap@10": _overlap(top, base),
                        "source@10": _source_at(top, source),
                        "arith": (n_doc_vectors + fraction * page_tokens_scored) / page_tokens_scored,
                        "arith_768": (n_doc_vectors + fraction * P * REAL_PAGE_TOKENS) / (P * REAL_PAGE_TOKENS),
                    }
                )
    bracket_walls = [w for w, _ in brackets]
    out.update(
        {
            "base_s": float(base_walls.sum()),
            "base_cpu_s": float(base_cpus.sum()),
            "base_group_s": base_walls.tolist(),
            "bracket_base_s": bracket_walls,
            "base_source@10": _source_at(base, source),
            "rows": rows,
            "load_average_after": os.getloadavg()[0],
        }
    )
    print_part_a(args, out)
    return out


def print_part_a(args, out: dict) -> None:
    P, T, n_docs, base_s = args.pages, args.page_tokens, out["n_docs"], out["base_s"]
    brackets = out["bracket_base_s"]
    log()
    log(
        f"Part A summary: {P:,} pages ({n_docs:,} documents), {args.queries} queries x {args.query_tokens} tokens, "
        f"{T} tokens/page x {args.dim} dims, fp16, top-{args.depth}, {out['cpu_count']} CPUs "
        f"(torch {out['torch_threads']} threads), load average {out['load_average_before']:.1f} before, "
        f"{out['load_average_after']:.1f} after"
    )
    log(
        f"base = exhaustive exact search, {base_s:.1f} s ({out['base_cpu_s']:.0f} CPU s) in {len(out['base_group_s'])} "
        f"groups of shards; during the hierarchical runs, base on one group scaled to all pages took "
        f"{min(brackets):.0f}-{max(brackets):.0f} s (the machine's load drift). Source page in base's top-10: "
        f"{out['base_source@10']:.0%}"
    )
    header = (
        f"{'setting':<26}{'build s':>9}{'ms/doc':>8}{'search s':>10}{'vs base':>9}{'(range)':>13}{'CPU':>7}"
        f"{'stage 1':>9}{'page scores':>13}{'top-10 ovl':>11}{'src@10':>8}{'arith.':>8}{'@768 tok':>10}"
    )
    log(header)
    log("-" * len(header))
    log(
        f"{'base (exact, exhaustive)':<26}{'':>9}{'':>8}{base_s:>10.1f}{1:>8.2f}x{'':>13}{1:>6.2f}x{'':>9}{1:>13.2%}"
        f"{1:>11.2f}{out['base_source@10']:>8.0%}{1:>8.2f}{1:>10.2f}"
    )
    for r in out["rows"]:
        if r["kind"] == "ctx":
            build, per_doc = f"{r['build_s']:.1f}", f"{r['build_ms_per_doc']:.2f}"
        elif r["build_s"] is not None:
            build, per_doc = f"{r['build_s']:.1f}", f"{1e3 * r['build_s'] / n_docs:.2f}"
        else:
            build, per_doc = "(ctx)", ""
        spread = f"{r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f}"
        stage1 = f"{r['stage1_ratio']:.2f}x" if r["stage1_ratio"] is not None else ""
        log(
            f"{r['setting']:<26}{build:>9}{per_doc:>8}{r['search_s']:>10.1f}{r['ratio']:>8.2f}x{spread:>13}"
            f"{r['cpu_ratio']:>6.2f}x{stage1:>9}{r['page_score_fraction']:>13.2%}{r['overlap@10']:>11.2f}"
            f"{r['source@10']:>8.0%}{r['arith']:>8.2f}{r['arith_768']:>10.2f}"
        )
    log(
        "vs base: ctx, the median over the groups of shards of ctx / base on the same group, run back to back "
        "(range: min-max over groups); hierarchical, its time / the mean of the base estimates just before and "
        "after it (range: against each); CPU: the same with CPU seconds (all threads); stage 1: hierarchical's "
        "document ranking alone (exact search over the document vectors) / base"
    )
    log(
        "build s, ms/doc: one-off per (page store, n_ctx), cached by the pipeline: spherical k-means per document, "
        "in one process with faiss on one thread (the pipeline's workers=1; perf/bench_context.py measures its worker "
        "processes and memory). At the paper's "
        f"{PAPER_DOCS:,} documents: "
        + ", ".join(
            f"n_ctx={r['n_ctx']} {PAPER_DOCS * r['build_ms_per_doc'] / 1e3 / 60:.1f} min"
            for r in out["rows"]
            if r["kind"] == "ctx"
        )
        + f" at {T} tokens a page; k-means grows about linearly with a document's tokens (x{REAL_PAGE_TOKENS // T} "
        f"at {REAL_PAGE_TOKENS})"
    )
    log(
        "page scores: (query, page) MaxSims computed / exhaustive; top-10 ovl: mean |top-10 ∩ base top-10| / 10; "
        "src@10: queries whose source page is in the top-10"
    )
    log(
        f"arith.: multiply-adds vs base (context or document vectors + page tokens scored); @768 tok: the same "
        f"projected to {REAL_PAGE_TOKENS} tokens a page (the real ColQwen2.5 page; base grows "
        f"{REAL_PAGE_TOKENS / T:.0f}x, a document's n_ctx vectors do not): the ratios the search times tend to there"
    )
    checks = {
        f"at least 100,000 pages (the acceptance size; {P:,} here)": P >= 100_000,
        "base estimates during the hierarchical runs within 25% of each other (load steady)": max(brackets)
        <= 1.25 * min(brackets),
        "every hierarchical run computed fewer page scores than exhaustive search": all(
            r["page_score_fraction"] < 1 for r in out["rows"] if r["kind"] == "hierarchical"
        ),
    }
    for label, ok in checks.items():
        log(f"  [{'pass' if ok else 'FAIL'}] {label}")
    out["checks"] = checks


# --------------------------------------------------------------------------------------------
# Part B: the shipped mini through the real pipeline, tiny random ColQwen2.5
# --------------------------------------------------------------------------------------------


def part_b(args) -> dict:
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    os.environ.setdefault("WANDB_MODE", "disabled")
    import pyarrow.parquet as pq

    from helpers import evaluate, tiny_overrides
    from tiny_models import build_tiny_colqwen25
    from vldocir.data.benchmark import load_benchmark

    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="bench-settings-mini-") as tmp:
        tmp = Path(tmp)
        checkpoint = build_tiny_colqwen25(tmp / "colqwen25")
        common = [
            *tiny_overrides("colqwen25", {"colqwen25": checkpoint}),
            f"paths.root_dir={REPO_ROOT}",
            f"dataset.source={args.mini_dir.resolve()}",
            f"paths.cache_dir={tmp / 'cache'}",
            f"paths.results_dir={tmp / 'results'}",
            f"paths.log_dir={tmp / 'logs'}",
            f"paths.data_dir={tmp / 'data'}",
            "logger=none",
            f"n_ctx={args.mini_n_ctx}",
        ]
        bench = load_benchmark(args.mini_dir)
        pages = bench.arrow("pages", ["page_id", "doc_id"]).to_pandas()
        n_docs = pages["doc_id"].nunique()

        def run(*overrides: str) -> dict:
            tick = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                result = evaluate(*common, *overrides)
            wall = time.perf_counter() - tick
            retrieval = result.manifest.get("retrieval") or {}
            run_table = pq.read_table(result.entry / "run.parquet", columns=["query_id", "page_id", "rank"]).to_pandas()
            top10 = {q: set(g.nsmallest(OVERLAP_K, "rank")["page_id"]) for q, g in run_table.groupby("query_id")}
            return {
                "overrides": list(overrides),
                "wall_s": wall,
                "search_s": (retrieval.get("search") or {}).get("search_s"),
                "recallall@10": result.metrics["aggregates"]["macro"]["recallall@10"],
                "ndcg@10": result.metrics["aggregates"]["macro"]["ndcg@10"],
                "n_queries": result.metrics["n_queries"],
                "hierarchical": retrieval.get("hierarchical"),
                "doc_context": retrieval.get("doc_context"),
                "setting_dir": result.entry.parent.name,
                "entry": str(result.entry),
                "_top10": top10,
            }

        base = run()
        log(
            f"Part B: base {base['wall_s']:.1f} s (encoding the {len(pages)} pages and "
            f"{base['n_queries']} queries with "
            f"the tiny model included), Macro RecallAll@10 {base['recallall@10']:.2f}"
        )
        rows = []
        for doc_vectors in ("context", "pooled"):
            for top_docs in args.mini_top_docs:
                r = run(
                    "setting=hierarchical",
                    f"retriever.model.hierarchical.top_docs={top_docs}",
                    f"retriever.model.hierarchical.doc_vectors={doc_vectors}",
                )
                r.update(doc_vectors=doc_vectors, top_docs=top_docs)
                r["overlap@10"] = float(
                    np.mean([len(r["_top10"].get(q, set()) & t) / OVERLAP_K for q, t in base["_top10"].items()])
                )
                rows.append(r)
                log(
                    f"  {r['setting_dir']}: {r['wall_s']:.1f} s, "
                    f"{r['hierarchical']['page_score_fraction']:.1%} of page "
                    f"scores, Macro RecallAll@10 {r['recallall@10']:.2f}"
                )
    for r in [base, *rows]:
        del r["_top10"]
    log()
    log(
        f"Part B summary: {args.mini_dir.name} ({len(pages)} pages, {n_docs} documents, "
        f"{base['n_queries']} queries), tiny random "
        f"ColQwen2.5 (tests/tiny_models.py, 64 visual tokens), real pipeline, n_ctx={args.mini_n_ctx}"
    )
    header = (
        f"{'setting':<28}{'search s':>10}{'page scores':>13}{'RecallAll@10':>14}{'vs base':>9}"
        f"{'nDCG@10':>9}{'top-10 ovl':>11}"
    )
    log(header)
    log("-" * len(header))
    log(
        f"{'base (exhaustive)':<28}{base['search_s'] or 0:>10.2f}{1:>13.1%}{base['recallall@10']:>14.2f}{'':>9}"
        f"{base['ndcg@10']:>9.2f}{1:>11.2f}"
    )
    for r in rows:
        log(
            f"{r['setting_dir']:<28}{r['search_s'] or 0:>10.2f}{r['hierarchical']['page_score_fraction']:>13.1%}"
            f"{r['recallall@10']:>14.2f}{r['recallall@10'] - base['recallall@10']:>+9.2f}{r['ndcg@10']:>9.2f}"
            f"{r['overlap@10']:>11.2f}"
        )
    log(
        "The tiny model is randomly initialised: its rankings are close to random, so these RecallAll@10 changes "
        "say nothing about the method's quality; the page-score fraction and the machinery are what this checks."
    )
    log(
        "(RecallAll@10 in %, Macro over the six structures; page scores = manifest "
        "retrieval.hierarchical.page_score_fraction; search s = manifest retrieval.search.search_s)"
    )
    checks = {
        "every hierarchical run recorded page_score_fraction < 1": all(
            0 < r["hierarchical"]["page_score_fraction"] < 1 for r in rows if r["top_docs"] < n_docs
        )
    }
    for label, ok in checks.items():
        log(f"  [{'pass' if ok else 'FAIL'}] {label}")
    return {"base": base, "rows": rows, "n_pages": len(pages), "n_docs": n_docs, "checks": checks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See the module docstring and perf/README.md."
    )
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--page-tokens", type=int, default=64, help="tokens per page (the real model: up to 768)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--pages-per-doc", type=int, default=13, help="mean pages a document (1 to 2x-1)")
    parser.add_argument("--queries", type=int, default=128)
    parser.add_argument("--query-tokens", type=int, default=20)
    parser.add_argument("--shard-size", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--n-ctx", type=_ints, default=[32, 256], help="comma-separated, e.g. 32,256")
    parser.add_argument("--top-docs", type=_ints, default=[10, 50], help="comma-separated, e.g. 10,50")
    parser.add_argument("--kmeans-iterations", type=int, default=20)
    parser.add_argument(
        "--groups",
        type=int,
        default=10,
        help="groups of shards over which base and ctx are interleaved (their ratio: the median)",
    )
    parser.add_argument("--query-batch-size", type=int, default=32)
    parser.add_argument("--page-block-tokens", type=int, default=4096)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mini-top-docs", type=_ints, default=[1, 3, 5, 10])
    parser.add_argument("--mini-n-ctx", type=int, default=32)
    parser.add_argument(
        "--mini-dir",
        type=Path,
        default=REPO_ROOT / "data" / "vl-docir-mini",
        help="the benchmark of Part B (default: the shipped mini)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: on a shared machine more threads stall on every small op; 0: torch's choice)",
    )
    parser.add_argument("--skip-mini", action="store_true", help="Part A only")
    parser.add_argument("--skip-random", action="store_true", help="Part B only")
    parser.add_argument("--quick", action="store_true", help="5,000 pages, 64 queries")
    parser.add_argument("--smoke", action="store_true", help="2,000 pages, 20 queries, mini with top_docs 1 only")
    parser.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"), help="where the temporary files go")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.queries = 5_000, 64
    if args.smoke:
        args.pages, args.queries, args.mini_top_docs = 2_000, 20, [1]
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    figures: dict = {}

    def save() -> None:  # after each part, so that a failure in Part B keeps Part A's figures
        if args.out:
            args.out.write_text(json.dumps(figures, indent=2, default=str))

    if not args.skip_random:
        figures["random"] = part_a(args)
        save()
    if not args.skip_mini:
        log()
        figures["mini"] = part_b(args)
        save()
    if args.out:
        log(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

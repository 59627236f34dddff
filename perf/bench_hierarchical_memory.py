"""Peak memory of hierarchical search (both stages) at 1x and 2x the documents: it should stay flat.

    .venv/bin/python perf/bench_hierarchical_memory.py            # 8,000 and 16,000 documents: about 12 s
    .venv/bin/python perf/bench_hierarchical_memory.py --smoke    # 500 and 1,000 documents, small shards: seconds

Each size runs in its own subprocess on random data: ``--docs`` documents of ``--doc-tokens``
fp16 document vectors (as the context store holds them: a memory map), ``--pages-per-doc`` pages
of ``--page-tokens`` vectors each, streamed as shards of 1,024 pages generated on the fly, and
``--queries`` queries. The figure is the peak anonymous resident memory (``RssAnon``, sampled
every 2 ms; the memory map's file pages are left out, as the OS can drop them) above the level
before the search. ``--doc-shard-tokens`` sets stage 1's shard bound (default: the library's);
a value above the document vectors' count gives the former single fp32 shard, for contrast.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARD_PAGES = 1024


def rss_anon_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


class PeakSampler:
    """The highest :func:`rss_anon_bytes` seen while the ``with`` block runs."""

    def __enter__(self) -> PeakSampler:
        self.peak, self._stop = rss_anon_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss_anon_bytes())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon_bytes())


def measure(args) -> None:
    """One size, in this process: prints ``baseline_bytes peak_bytes seconds``."""
    import torch

    from vldocir.retrieval.hierarchical import DOC_SHARD_TOKENS, hierarchical_search
    from vldocir.retrieval.vectors import RaggedVectors

    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    n_pages = args.docs * args.pages_per_doc
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        path = Path(tmp) / "doc_vectors.npy"
        stored = np.lib.format.open_memmap(path, "w+", np.float16, (args.docs * args.doc_tokens, args.dim))
        for start in range(0, len(stored), 1 << 18):
            block = stored[start : start + (1 << 18)]
            block[:] = rng.standard_normal(block.shape, dtype=np.float32)
        stored.flush()
        del stored
        doc_vectors = RaggedVectors(
            np.load(path, mmap_mode="r"), np.arange(args.docs + 1, dtype=np.int64) * args.doc_tokens
        )
        queries = RaggedVectors.from_list(
            [rng.standard_normal((args.query_tokens, args.dim), dtype=np.float32) for _ in range(args.queries)]
        )
        doc_of_page = np.arange(n_pages, dtype=np.int64) // args.pages_per_doc

        def page_shards():
            for first in range(0, n_pages, SHARD_PAGES):
                count = min(SHARD_PAGES, n_pages - first)
                shard_rng = np.random.default_rng([args.seed, first])
                vectors = shard_rng.standard_normal((count * args.page_tokens, args.dim), dtype=np.float32)
                offsets = np.arange(count + 1, dtype=np.int64) * args.page_tokens
                yield RaggedVectors(vectors.astype(np.float16), offsets, first_index=first)

        tick = time.perf_counter()
        with PeakSampler() as sampler:
            baseline = sampler.peak
            hierarchical_search(
                queries,
                doc_vectors,
                doc_of_page,
                page_shards(),
                args.depth,
                args.top_docs,
                n_items=n_pages,
                device="cpu",
                progress=False,
                doc_shard_tokens=args.doc_shard_tokens or DOC_SHARD_TOKENS,
            )
        print(baseline, sampler.peak, round(time.perf_counter() - tick, 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=8000, help="documents at 1x")
    parser.add_argument("--doc-tokens", type=int, default=64, help="document vectors a document (n_ctx)")
    parser.add_argument("--pages-per-doc", type=int, default=4)
    parser.add_argument("--page-tokens", type=int, default=8)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=32)
    parser.add_argument("--query-tokens", type=int, default=16)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--top-docs", type=int, default=10)
    parser.add_argument("--doc-shard-tokens", type=int, default=0, help="stage 1's bound; 0: the library's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp", default=None, help="where the memory-mapped document vectors go")
    parser.add_argument("--smoke", action="store_true", help="500 and 1,000 documents, shards of 8,192 vectors")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # one size, in a subprocess
    args = parser.parse_args(argv)
    if args.smoke:
        args.docs, args.doc_shard_tokens = 500, args.doc_shard_tokens or 8192
    if args.measure:
        measure(args)
        return 0
    growth = {}
    for scale in (1, 2):
        docs = args.docs * scale
        options = {**vars(args), "docs": docs}
        command = [sys.executable, __file__, "--measure"] + [
            f"--{name.replace('_', '-')}={value}"
            for name, value in options.items()
            if name not in ("smoke", "measure") and value is not None
        ]
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            return 1
        baseline, peak, seconds = done.stdout.split()[-3:]
        growth[scale] = int(peak) - int(baseline)
        print(
            f"{scale}x: {docs:,} documents, {docs * args.doc_tokens:,} document vectors: search peak "
            f"{growth[scale] / 2**20:,.0f} MiB above {int(baseline) / 2**20:,.0f} MiB, {float(seconds):.1f} s",
            flush=True,
        )
    ratio = growth[2] / max(growth[1], 1)
    print(f"2x / 1x peak growth: {ratio:.2f} ({'flat' if ratio <= 1.1 else 'NOT flat'}: within 10% is flat)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

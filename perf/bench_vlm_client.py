"""The query stage's VLM client at server speed: requests/s and client CPU per request against a
stub that answers at once, beside the raw ``openai`` client making the same requests.

    .venv/bin/python perf/bench_vlm_client.py                   # 1, 2, 4 endpoints x concurrency 8, 32: ~4 min
    .venv/bin/python perf/bench_vlm_client.py --smoke           # seconds (tests/perf/test_bench_vlm_client.py)
    .venv/bin/python perf/bench_vlm_client.py --endpoints 1 2 --concurrency 16 --requests 1000 --json figures.json

The stub is an asyncio HTTP/1.1 server in its own process (so that its CPU is not the client's),
listening on one port per endpoint: it reads each request's body without parsing it and answers a
fixed chat completion (``--answer-chars`` of content, ``finish_reason=stop``) at once. Its CPU per
request is printed too, so it is seen not to be the limit either.

The requests have the shape of the generation step's (``QueryGenerator.generate_messages``): one
user message of a prompt and a page's HTML (``--html-chars``), and ``--images`` page images inline
as base64 (the mini benchmark's JPEG pages, about 50 KB each, in turn), each request distinct (its
number in the text). They are built before the clock starts, as the stage builds them before
``complete_many``. Each measurement is one ``complete_many`` call (or the peer's equivalent) over
``--requests`` requests, timed by wall clock and by ``time.process_time()`` of this process (every
thread of the client; the stub's process apart); the four are repeated ``--repeats`` times in turn
and the median of each figure printed:

- **ours**: ``vldocir.llm.ChatClient(base_url=[endpoints], concurrency=c).complete_many(requests)``,
  cache off: the client's own cost (cache keys hashed all the same);
- **ours, cache written**: the same into an empty cache directory (each answer stored);
- **ours, cache replayed**: the same requests again, every answer read from that cache;
- **peer**: the raw ``openai`` client, one per endpoint, ``chat.completions.create`` from
  ``c x endpoints`` threads, requests dealt to the endpoints in turn: what the query stage would
  cost without vldocir's layer (no cache, no answer checks, no balancing).

Ratios ours/peer are of the same run, so they compare across machines. The one-time costs (module
imports, the first connection to each endpoint) are paid before the clock, by one warm-up request
per endpoint. A VLM server does tens of requests/s at best (a 32B VLM on one H100 with a page image
per request: a few): the client is not the limit while 1000 / (CPU-ms per request) is far above that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))

MODEL = "stub-vlm"
PAGES = REPO_ROOT / "data" / "vl-docir-mini" / "pages"


# -- the stub server (its own process) ------------------------------------------------------------------
def _serve(ports_out, n_ports: int, answer_chars: int) -> None:
    """Serve ``n_ports`` endpoints on 127.0.0.1 until killed; put their ports on ``ports_out``.
    ``GET /stats`` on any of them: requests and most in flight per port, and the stub's CPU seconds."""
    content = ("The page shows a table of quarterly revenue. " * (answer_chars // 45 + 1))[:answer_chars]
    answer = json.dumps(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1500, "completion_tokens": answer_chars // 4, "total_tokens": 0},
        }
    ).encode()
    models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
    stats: dict[int, dict[str, int]] = {}

    async def connection(reader, writer, port: int) -> None:
        counts = stats[port]
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                path = head[0].split(" ")[1]
                length = next(
                    (int(v) for k, _, v in (h.partition(":") for h in head) if k.lower() == "content-length"), 0
                )
                counts["in_flight"] += 1
                counts["max_in_flight"] = max(counts["max_in_flight"], counts["in_flight"])
                if length:
                    await reader.readexactly(length)  # read, never parsed
                if path.startswith("/stats"):
                    body = json.dumps({"ports": stats, "cpu_s": time.process_time()}).encode()
                elif path.rstrip("/").endswith("/models"):
                    body = models
                else:
                    counts["requests"] += 1
                    body = answer
                counts["in_flight"] -= 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                )
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        ports = []
        for _ in range(n_ports):
            holder: list[int] = []
            server = await asyncio.start_server(
                lambda r, w, h=holder: connection(r, w, h[0]), "127.0.0.1", 0, limit=1 << 20, backlog=1024
            )
            port = server.sockets[0].getsockname()[1]
            holder.append(port)
            stats[port] = {"requests": 0, "in_flight": 0, "max_in_flight": 0}
            ports.append(port)
        ports_out.put(ports)
        await asyncio.Event().wait()

    asyncio.run(main())


class Stub:
    def __init__(self, n_ports: int, answer_chars: int):
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: none of this process's threads
        queue = context.Queue()
        self.process = context.Process(target=_serve, args=(queue, n_ports, answer_chars), daemon=True)
        self.process.start()
        self.urls = [f"http://127.0.0.1:{port}/v1" for port in queue.get(timeout=60)]

    def stats(self) -> dict:
        with urllib.request.urlopen(self.urls[0].removesuffix("/v1") + "/stats", timeout=30) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        self.process.kill()
        self.process.join(timeout=10)


# -- the requests and the measurements --------------------------------------------------------------------
def build_requests(n: int, images: int, html_chars: int, offset: int = 0) -> list[list[dict]]:
    from vldocir.llm import image_part

    pages = sorted(PAGES.rglob("*.jpg"))[:64] if PAGES.is_dir() else []
    blobs = [p.read_bytes() for p in pages] or [os.urandom(50_000)]
    html = (
        "<p>Quarterly revenue grew in every region; the table below gives the figures.</p>\n" * (html_chars // 80 + 1)
    )[:html_chars]
    prompt = "You are given pages of a document and their HTML. Write five questions ... " * 25
    requests = []
    for i in range(offset, offset + n):
        content = [{"type": "text", "text": f"{prompt}\n\nRequest {i}.\n\n{html}"}]
        content += [image_part(blobs[(i * images + k) % len(blobs)], "image/jpeg") for k in range(images)]
        requests.append([{"role": "user", "content": content}])
    return requests


def measure(call) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    n = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"requests": n, "wall_s": round(wall, 3), "rps": round(n / wall, 1), "cpu_ms": round(1000 * cpu / n, 3)}


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each figure over the repeats (each figure on its own)."""
    return {k: statistics.median(run[k] for run in runs) for k in runs[0]} | {"repeats": len(runs)}


def ours(urls: list[str], concurrency: int, requests: list, cache_dir: Path | None) -> int:
    from vldocir.llm import ChatClient

    llm = ChatClient(
        model=MODEL,
        base_url=urls,
        concurrency=concurrency,
        cache_dir=cache_dir,
        max_retries=0,
        timeout_s=120,
        max_tokens=4096,
        api_env_var="VLDOCIR_BENCH_NO_KEY",
    )
    results = llm.complete_many(requests)
    if failed := [r.error for r in results if not r.ok]:
        raise SystemExit(f"bench_vlm_client: {len(failed)} request(s) failed, e.g. {failed[0]}")
    return len(results)


def peer(urls: list[str], concurrency: int, requests: list) -> int:
    import openai

    clients = [openai.OpenAI(base_url=u, api_key="EMPTY", max_retries=0, timeout=120) for u in urls]

    def one(i: int) -> str:
        answer = clients[i % len(clients)].chat.completions.create(
            model=MODEL, messages=requests[i], temperature=0.0, max_tokens=4096
        )
        return answer.choices[0].message.content

    with ThreadPoolExecutor(max_workers=concurrency * len(urls)) as pool:
        answers = list(pool.map(one, range(len(requests))))
    assert all(answers)
    return len(answers)


def run(args: argparse.Namespace) -> dict:
    import openai  # noqa: F401  (imported before any clock: a run pays it once)

    import vldocir.llm  # noqa: F401

    load = [round(x, 2) for x in os.getloadavg()]
    print(
        f"{args.requests} requests a measurement: {args.images} page image(s) + {args.html_chars:,} chars of text "
        f"each; answers of {args.answer_chars:,} chars; {os.cpu_count()} cores, load average {load}",
        flush=True,
    )
    figures: dict = {"args": vars(args), "load_before": load, "rows": []}
    header = (
        f"{'endpoints':>9} {'conc.':>5} | {'ours req/s':>10} {'CPU-ms':>7} | {'peer req/s':>10} {'CPU-ms':>7} | "
        f"{'ratio req/s':>11} {'CPU':>5} | {'cache written':>13} {'CPU-ms':>7} | {'replayed':>8} {'CPU-ms':>7} | "
        f"{'stub CPU-ms':>11} {'split':>9}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    batch = 0
    for n_endpoints in args.endpoints:
        stub = Stub(n_endpoints, args.answer_chars)
        try:
            for concurrency in args.concurrency:
                warm = build_requests(n_endpoints, args.images, args.html_chars, offset=10**6 + batch)
                ours(stub.urls, concurrency, warm, None)
                peer(stub.urls, concurrency, warm)
                before = stub.stats()
                row = {"endpoints": n_endpoints, "concurrency": concurrency}
                requests = build_requests(args.requests, args.images, args.html_chars, offset=batch * args.requests)
                batch += 1
                runs: dict[str, list[dict]] = {"ours": [], "peer": [], "cache_written": [], "cache_replayed": []}
                for _ in range(args.repeats):  # interleaved, so that a change of the machine's load hits all
                    runs["ours"].append(measure(lambda r=requests, c=concurrency, u=stub.urls: ours(u, c, r, None)))
                    runs["peer"].append(measure(lambda r=requests, c=concurrency, u=stub.urls: peer(u, c, r)))
                    with tempfile.TemporaryDirectory(dir=args.tmp) as cache:
                        for name in ("cache_written", "cache_replayed"):
                            runs[name].append(
                                measure(lambda r=requests, c=concurrency, u=stub.urls: ours(u, c, r, Path(cache)))
                            )
                row.update({name: median_of(measured) for name, measured in runs.items()})
                after = stub.stats()
                served = {p: after["ports"][p]["requests"] - before["ports"][p]["requests"] for p in after["ports"]}
                row["stub_cpu_ms"] = round(1000 * (after["cpu_s"] - before["cpu_s"]) / max(1, sum(served.values())), 3)
                row["per_endpoint"] = sorted(served.values())
                row["max_in_flight"] = max(s["max_in_flight"] for s in after["ports"].values())
                row["ratio_rps"] = round(row["ours"]["rps"] / row["peer"]["rps"], 2)
                row["ratio_cpu"] = round(row["ours"]["cpu_ms"] / row["peer"]["cpu_ms"], 2)
                figures["rows"].append(row)
                split = "/".join(str(n) for n in row["per_endpoint"])
                print(
                    f"{n_endpoints:>9} {concurrency:>5} | {row['ours']['rps']:>10,.0f} {row['ours']['cpu_ms']:>7.2f} | "
                    f"{row['peer']['rps']:>10,.0f} {row['peer']['cpu_ms']:>7.2f} | {row['ratio_rps']:>11.2f} "
                    f"{row['ratio_cpu']:>5.2f} | {row['cache_written']['rps']:>13,.0f} "
                    f"{row['cache_written']['cpu_ms']:>7.2f} | {row['cache_replayed']['rps']:>8,.0f} "
                    f"{row['cache_replayed']['cpu_ms']:>7.2f} | {row['stub_cpu_ms']:>11.2f} {split:>9}",
                    flush=True,
                )
        finally:
            stub.stop()
    figures["load_after"] = [round(x, 2) for x in os.getloadavg()]
    worst = max(row["ours"]["cpu_ms"] for row in figures["rows"])
    figures["worst_cpu_ms"] = worst
    print(
        f"split: requests per endpoint (the stub's count over all repeats, the replays excepted); load average after "
        f"{figures['load_after']}\nours at its costliest: {worst:.2f} CPU-ms a request, so one core feeds "
        f"{1000 / worst:,.0f} requests/s, against the tens a VLM server answers",
        flush=True,
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32], help="per endpoint")
    parser.add_argument("--requests", type=int, default=400, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="of each measurement, interleaved; medians printed")
    parser.add_argument("--images", type=int, default=2, help="page images per request")
    parser.add_argument("--html-chars", type=int, default=20_000)
    parser.add_argument("--answer-chars", type=int, default=2_000)
    parser.add_argument("--tmp", default=None, help="where the cache directories go (default: the system's)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--smoke", action="store_true", help="1 and 2 endpoints, concurrency 2, 20 requests")
    args = parser.parse_args(argv)
    if args.smoke:
        args.endpoints, args.concurrency, args.requests, args.repeats = [1, 2], [2], 20, 1
    figures = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

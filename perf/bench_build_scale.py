"""The build at the paper's scale: what each construction stage costs per page, what the sharded
build gains with 1, 2 and 4 local submitit workers, and the projection for the paper's corpus.

Three parts, each on the real documents of ``../shared/real-html/`` (``--real-html``, or
``$VLDOCIR_REAL_HTML``; read where they lie, through a document index this script writes, which
gives each its source as ``tests/construction/test_render_real.py`` does), every one with fresh
cache and output folders under a temporary directory, so nothing is reused:

1. **Stage costs**, the stages of ``vldocir.construction.ingest`` called one after the other as the
   build calls them, each timed alone:

   - render + paginate: ``render_batch`` in a subprocess measured from outside
     (``perf/bench_build.py``'s ``render``: the CPU of the whole process tree, Chromium included),
     split between the two in proportion to the documents' own timings (``layout.json``:
     ``paginate`` = cut choice, page captures and image writes; the rest = load, settle, clean-up,
     extraction and element placement; Python start and browser launch fall in proportion);
   - assemble: ``assemble_rendered`` (the three tables, page images stored into the benchmark);
   - OCR: ``ocr_pages`` at the project's settings (``OcrConfig()``), every Tesseract process counted;
   - evidence sampling: the query stage without its model, ``sample_evidence_configs`` with
     ``conf/queries/generated.yaml``'s sampling and encoder (the encoder's load is printed apart,
     a fixed cost);
   - write: ``write_benchmark`` (Parquet tables, fingerprint over the page images).

   CPU = this process's ``time.process_time`` (all threads) + its reaped children
   (``getrusage(RUSAGE_CHILDREN)``: Tesseract), except the render, measured from outside.
   Assemble, evidence sampling and write are called three times (into fresh folders) and the
   cheapest of the second and third calls counts: on a few pages a first call's imports and lazy
   set-up would pass for a cost per page, and other work on the machine only adds to a call
   (torch's threads spin while they wait for a core); these stages run in one process after the
   array, where their per-page cost weighs on the wall time (part 3). The first call's CPU is
   printed beside.
2. **The sharded build**, ``python -m vldocir.apps.build input=<index> queries=none`` end to end in
   a subprocess measured from outside (wall time; CPU of the driver, every submitit task, every
   Chromium and Tesseract process): the plain one-process build on all the machine's cores
   (``build.shards`` left at its default, 1); the one-worker build, ``build.shards=1`` with the
   array's overrides, pinned to one core (its CPU affinity: one render worker, one Tesseract
   process); and ``build.shards=K hydra/launcher=submitit_local hydra.launcher.cpus_per_task=1``
   for each other ``--workers`` K (a K-task job array, all tasks at once, on all the cores).
   Speed-up = wall(one worker) / wall(K); efficiency = speed-up / K; of bound = speed-up / the
   most the run allows: min(K, the cores, pages / the largest shard's pages, from the build
   report's ``built_by.shards``: with a few documents one shard can hold most pages); the
   sharding's overhead = each array's CPU over the one-worker build's (``build.shards=1`` is the
   one-process build by design, so there is no 1-task array to compare with the plain build: the
   row says which ran). Every build's fingerprint is printed (equal whatever the shard count). A K
   above the machine's cores cannot speed up past the cores (said in the output).
3. **The projection** for the paper's corpus (documents and pages from ``../shared/paper/facts.md``,
   else the issue's 29,641 and 388,548): total CPU-hours from the per-page costs, and wall time

       wall(cores, e) = P / (cores x e) + S

   with P the CPU of the stages a shard runs (render, paginate, OCR), S that of the stages the
   driver runs after the array in one process (assemble, evidence sampling, write), e an
   efficiency. Sharded: ``--cores`` one-core tasks (default 512) at the "of bound" efficiency
   measured with the most workers that fit on this machine's cores (a shard of the paper's corpus
   holds hundreds of documents: hashing splits them evenly), on ``ceil(cores / --cores-per-node)``
   nodes.
   Single process: one build on one node of ``--cores-per-node`` cores (default: this machine's),
   at the plain build's measured use of its cores (CPU / wall / cores).
   The efficiency measured on a few dozen pages includes every task's start-up (Python, imports,
   browser launch, the driver's checks), which a shard of the paper's corpus spreads over hundreds
   of pages: the sharded line and the linear one (e = 1) printed under it bracket the wall time.

    .venv/bin/python perf/bench_build_scale.py             # five real documents (34 pages): 13 min at load 7-12
    .venv/bin/python perf/bench_build_scale.py --quick     # the two Wikipedia documents, 1 and 2 workers: ~4 min
    .venv/bin/python perf/bench_build_scale.py --cores 2048 --cores-per-node 64 --json figures.json

This is a script, not a timed test: the figures depend on the machine and on its other load
(printed: the load average before and after each part).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "src"))
sys.path.insert(0, str(REPO_ROOT / "perf"))

import bench_build  # noqa: E402  (perf/: the measured render and the in-process stage timer)
import bench_render  # noqa: E402  (perf/: the real documents and the process-tree meter)

FACTS = REPO_ROOT.parent / "shared" / "paper" / "facts.md"
ISSUE_CORPUS = (29_641, 388_548)  # issue 37, when facts.md is absent
QUICK_DOCS = ("wikipedia-a", "wikipedia-b")
SHARD_STAGES = ("render", "paginate", "OCR")  # run by the array's tasks; the rest by the driver after it

log = bench_build.log


# --------------------------------------------------------------------------------------------
# Inputs


def paper_corpus(facts: Path) -> tuple[int, int, str]:
    """``(documents, pages, where from)`` of the paper's corpus."""
    if facts.is_file():
        found = re.search(r"([\d,]+) HTML-born documents rendered into ([\d,]+) page images", facts.read_text())
        if found:
            return int(found[1].replace(",", "")), int(found[2].replace(",", "")), str(facts)
    return *ISSUE_CORPUS, "issue 37"


def write_index(docs: list[tuple[str, str, str]], path: Path) -> Path:
    """A document index (``doc_id``, ``source``, ``path``) of ``docs`` for ``input=``."""
    rows = [{"doc_id": d, "source": s, "path": str(Path(html).parent)} for d, s, html in docs]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# --------------------------------------------------------------------------------------------
# 1. Stage costs


def warm_timed(fn, out: Path, repeat: int = 2):
    """``fn(out-1)`` timed, then ``repeat`` more calls ``fn(out-2)``, ...: the result and the wall
    and CPU seconds of the cheapest of those, with the first call's CPU (``first_call_cpu_s``): what
    a call costs once its imports and caches are warm (module doc). The cheapest, since other work
    on the machine only adds (torch's threads spin while they wait for a core)."""
    _, first = bench_build.timed(fn, out.with_name(out.name + "-1"))
    calls = [bench_build.timed(fn, out.with_name(f"{out.name}-{i + 2}")) for i in range(repeat)]
    result, warm = min(calls, key=lambda call: call[1]["cpu_s"])
    return result, {**warm, "first_call_cpu_s": first["cpu_s"]}


def stage_costs(docs: list[tuple[str, str, str]], workdir: Path, workers: int) -> dict:
    """CPU and wall seconds of each stage on ``docs`` (module doc), fresh folders under ``workdir``."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from vldocir.config_checks import CONF_DIR
    from vldocir.construction.build_generated import ShippedImages, assemble_rendered
    from vldocir.construction.documents import DocumentRecord
    from vldocir.construction.ocr import OcrConfig, ocr_pages
    from vldocir.construction.render import load_layout
    from vldocir.data.benchmark import write_benchmark
    from vldocir.queries.evidence_configs import sample_evidence_configs
    from vldocir.queries.user_queries import NoQueries

    workdir.mkdir(parents=True)
    stages: dict[str, dict] = {}
    log(f"stages: rendering {len(docs)} documents ...")
    _, rendered = bench_build.render(docs, workdir, workers)
    timings = [load_layout(workdir / "pages" / doc_id).timings for doc_id, _, _ in docs]
    share = sum(t.get("paginate", 0.0) for t in timings) / sum(t["total"] for t in timings)
    pages = rendered["pages"]
    stages["render"] = {"cpu_s": rendered["cpu_s"] * (1 - share), "wall_s": rendered["wall_s"] * (1 - share)}
    stages["paginate"] = {"cpu_s": rendered["cpu_s"] * share, "wall_s": rendered["wall_s"] * share}

    records = [DocumentRecord(doc_id, source, source, doc_id) for doc_id, source, _ in docs]
    log("stages: assembling the tables ...")
    (documents, page_frame, elements, _), stages["assemble"] = warm_timed(
        lambda out: assemble_rendered(records, workdir / "pages", out, ShippedImages()), workdir / "assembled"
    )
    log(f"stages: OCR of {len(page_frame)} pages ...")
    page_frame["ocr_text"], stages["OCR"] = bench_build.timed(
        ocr_pages, list(page_frame["full_size_path"]), workdir / "ocr-cache", OcrConfig(workers=workers)
    )

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="build", overrides=["queries=generated"])
    sampling, encoder = instantiate(cfg.queries.sampling), instantiate(cfg.queries.encoder)
    log("stages: evidence sampling (its encoder loaded first, apart) ...")
    _, encoder_load = bench_build.timed(encoder.prepare)
    configs, stages["evidence sampling"] = warm_timed(
        lambda _: sample_evidence_configs(documents, page_frame, elements, sampling, encoder, cfg.spec.near_max_gap),
        workdir / "unused",
    )

    log("stages: writing the benchmark ...")
    queries, qrels, query_report = NoQueries()(documents, page_frame, elements, {}, cfg.spec.near_max_gap)
    tables = {
        "documents": documents,
        "pages": page_frame.drop(columns="full_size_path"),
        "elements": elements,
        "queries": queries,
        "qrels": qrels,
    }
    info = {"name": "scale-stages", "version": "1", "rendered": True, "built_by": {"queries": query_report}}
    _, stages["write"] = warm_timed(lambda out: write_benchmark(out, tables, info), workdir / "assembled")

    total = sum(s["cpu_s"] for s in stages.values())
    for row in stages.values():
        row["cpu_s_per_page"] = row["cpu_s"] / pages
        row["share"] = row["cpu_s"] / total
    return {
        "documents": len(docs),
        "pages": pages,
        "stages": stages,
        "cpu_s_per_page": total / pages,
        "paginate_share_of_render_time": share,
        "encoder_load": encoder_load,
        "evidence_configs": len(configs),
        "render_cpu_s_rusage": rendered["cpu_s_rusage"],
    }


# --------------------------------------------------------------------------------------------
# 2. The sharded build


class NoShardedBuild(RuntimeError):
    """This checkout's build has no ``build.shards`` (the sharded build is not there yet)."""


def build_command(index: Path, workdir: Path, label: str, shards: int | None, overrides: list[str]) -> list[str]:
    """``python -m vldocir.apps.build`` of ``index`` into fresh folders named by ``label``;
    ``shards``: ``None`` for the plain one-process build, else ``build.shards`` through submitit_local;
    ``overrides``: ``--override``'s, for every build."""
    command = [
        sys.executable,
        "-m",
        "vldocir.apps.build",
        f"input={index}",
        "queries=none",
        "spec.name=real-html-scale",  # one name: equal benchmarks have equal fingerprints
        f"out_dir={workdir / label / 'benchmark'}",
        f"paths.cache_dir={workdir / label / 'cache'}",
        f"paths.log_dir={workdir / label / 'logs'}",
        f"hydra.run.dir={workdir / label / 'hydra'}",
        f"hydra.sweep.dir={workdir / label / 'sweep'}",  # submitit's folder (the plugin's default)
    ]
    command += overrides
    if shards is not None:
        command += [f"build.shards={shards}", "hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=1"]
    return command


def measure_build(
    command: list[str], label: str, workdir: Path, timeout_s: float, cores: set[int] | None = None
) -> dict:
    """Run one build in a subprocess measured from outside (:class:`bench_render.TreeMeter`), on
    ``cores`` only where given (its CPU affinity, which its children inherit and
    :func:`vldocir.threads.job_cpus` reads: one render worker and one Tesseract process on one core)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.getenv("PYTHONPATH")]))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
    )
    meter = bench_render.TreeMeter(proc.pid).start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the build's clean exit: it ends its browser, Tesseract and tasks
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise RuntimeError(f"{label}: the build ran past --timeout {timeout_s:g} s") from None
    finally:
        meter.stop()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        if "build.shards" in stderr and ("Could not override" in stderr or "not in struct" in stderr):
            raise NoShardedBuild(next(line for line in stderr.splitlines() if "build.shards" in line).strip())
        tail = (stdout + stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"{label} failed (exit {proc.returncode}):\n" + "\n".join(tail))
    out = workdir / label
    info = json.loads((out / "benchmark" / "benchmark.json").read_text())
    return {
        "label": label,
        "wall_s": wall,
        "cpu_s": meter.cpu_s,
        "cpu_s_rusage": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "cores_busy": meter.cpu_s / wall,
        "peak_pss_mib": meter.peak_pss / 2**20,
        "pages": info["counts"]["pages"],
        "fingerprint": info["fingerprint"],
        **array_figures(info["built_by"].get("shards")),
        "load_start": load0,
        "load_end": os.getloadavg()[0],
    }


def array_figures(shards: dict | None) -> dict:
    """What the build report says of its job array (``built_by.shards``; ``None``: one process ran):
    tasks, the array's own wall time, and the speed-up its split allows (pages / the largest
    shard's pages: with a few documents the largest shard bounds the wall time)."""
    if not shards:
        return {"array_tasks": 0}
    pages = [shard.get("pages", 0) for shard in shards.get("shards", [])]
    return {
        "array_tasks": sum(p > 0 for p in pages),
        "array_wall_s": shards.get("wall_s"),
        "shard_pages": pages,
        "split_bound": sum(pages) / max(pages) if pages and max(pages) else None,
    }


def sharded_builds(index: Path, workdir: Path, workers: list[int], timeout_s: float, overrides: list[str]) -> dict:
    """The plain build, the one-worker build and a K-task array for each other K of ``workers``
    (module doc)."""
    log("builds: the plain one-process build ...")
    plain = measure_build(build_command(index, workdir, "plain", None, overrides), "plain", workdir, timeout_s)
    one_core = {sorted(os.sched_getaffinity(0))[0]}
    arrays: dict[int, dict] = {}
    for k in workers:
        label = f"shards-{k}"
        log(
            f"builds: build.shards={k}, submitit_local, {k} task(s) at once"
            + (" on one core ..." if k == 1 else " ...")
        )
        try:
            cores = one_core if k == 1 else None
            arrays[k] = measure_build(
                build_command(index, workdir, label, k, overrides), label, workdir, timeout_s, cores
            )
        except NoShardedBuild as error:
            log(f"builds: no sharded build in this checkout ({error}); the array rows are left out")
            return {"plain": plain, "arrays": {}}
    for k, row in arrays.items():
        row["workers"] = k
        row["speedup"] = arrays[1]["wall_s"] / row["wall_s"]
        row["efficiency"] = row["speedup"] / k
        row["bound"] = min(k, len(os.sched_getaffinity(0)), row.get("split_bound") or k)
        row["of_bound"] = row["speedup"] / row["bound"]
        row["cpu_over_one_worker"] = row["cpu_s"] / arrays[1]["cpu_s"] - 1
    return {"plain": plain, "arrays": arrays}


# --------------------------------------------------------------------------------------------
# 3. The projection


def projected_wall_s(parallel_cpu_s: float, serial_cpu_s: float, cores: int, efficiency: float) -> float:
    """``P / (cores x e) + S`` (module doc): seconds of a build whose shard stages cost
    ``parallel_cpu_s`` in all and whose driver stages ``serial_cpu_s``."""
    return parallel_cpu_s / (cores * efficiency) + serial_cpu_s


def projection(
    stages: dict, pages: int, cores: int, cores_per_node: int, efficiency: float | None, single_use: float
) -> dict:
    """CPU-hours and wall times of a build of ``pages`` pages (module doc); ``efficiency`` ``None``:
    not measured, linear assumed; ``single_use``: the one-process build's CPU / wall / cores."""
    parallel = pages * sum(s["cpu_s_per_page"] for name, s in stages.items() if name in SHARD_STAGES)
    serial = pages * sum(s["cpu_s_per_page"] for name, s in stages.items() if name not in SHARD_STAGES)
    return {
        "cpu_hours": (parallel + serial) / 3600,
        "parallel_cpu_hours": parallel / 3600,
        "serial_cpu_hours": serial / 3600,
        "cores": cores,
        "nodes": math.ceil(cores / cores_per_node),
        "efficiency": efficiency,
        "sharded_wall_s": projected_wall_s(parallel, serial, cores, efficiency or 1.0),
        "linear_wall_s": projected_wall_s(parallel, serial, cores, 1.0),
        "cores_per_node": cores_per_node,
        "single_use": single_use,
        "single_wall_s": projected_wall_s(parallel, serial, cores_per_node, single_use),
    }


def _duration(seconds: float) -> str:
    hours = seconds / 3600
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h" if hours >= 1 else f"{seconds / 60:.0f} min"


# --------------------------------------------------------------------------------------------
# Driver


def main(argv=None) -> int:
    from vldocir.threads import job_cpus

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--real-html", type=Path, default=bench_render.REAL_HTML, help="folder of real documents (default: as tests)"
    )
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_DOCS)}; workers 1 and 2")
    ap.add_argument("--workers", type=int, nargs="+", default=None, help="array sizes besides 1 (default 2 4)")
    ap.add_argument("--cores", type=int, default=512, help="cores of the projected sharded build")
    ap.add_argument("--cores-per-node", type=int, default=os.cpu_count() or 1, help="cores of one node")
    ap.add_argument("--stage-workers", type=int, default=None, help="render/OCR workers of part 1 (default: cores)")
    ap.add_argument("--override", action="append", default=[], help="a Hydra override for every build (repeatable)")
    ap.add_argument("--timeout", type=float, default=7200, help="seconds one build may take")
    ap.add_argument("--workdir", type=Path, default=None, help="keep everything here (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    if not args.real_html.is_dir():
        raise SystemExit(f"no real pages at {args.real_html} (--real-html DIR or $VLDOCIR_REAL_HTML)")
    docs = bench_render.real_documents(args.real_html, 1)
    if args.quick:
        docs = [d for d in docs if d[0] in QUICK_DOCS] or docs[:2]
    if not docs:
        raise SystemExit(f"no <folder>/index.html under {args.real_html}")
    workers = sorted({1, *(args.workers or ([2] if args.quick else [2, 4]))})  # 1: the speed-ups' base
    cores = os.cpu_count() or 1
    stage_workers = args.stage_workers or job_cpus()
    n_docs, n_pages, corpus_from = paper_corpus(FACTS)
    figures: dict = {"machine_cores": cores, "job_cpus": job_cpus(), "load_start": os.getloadavg()}
    log(
        f"machine: {cores} cores (os.cpu_count()); load average {bench_build._load(figures['load_start'])} at start; "
        f"{len(docs)} documents: {', '.join(d[0] for d in docs)}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-build-scale-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        index = write_index(docs, workdir / "index.jsonl")
        figures["stages"] = stage_costs(docs, workdir / "stages", stage_workers)
        figures["load_after_stages"] = os.getloadavg()
        figures["builds"] = sharded_builds(index, workdir / "builds", workers, args.timeout, args.override)
    figures["load_end"] = os.getloadavg()

    builds = figures["builds"]
    plain = builds["plain"]
    fit = [k for k in builds["arrays"] if k <= cores]
    efficiency = builds["arrays"][max(fit)]["of_bound"] if fit else None
    figures["projection"] = {
        "documents": n_docs,
        "pages": n_pages,
        "from": corpus_from,
        **projection(
            figures["stages"]["stages"],
            n_pages,
            args.cores,
            args.cores_per_node,
            efficiency,
            plain["cores_busy"] / cores,
        ),
    }
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def report(figures: dict) -> None:
    s = figures["stages"]
    log("")
    log(f"1. CPU per page of each stage: {s['pages']} pages of {s['documents']} documents")
    header = f"{'stage':18s} {'wall s':>7s} {'CPU s':>7s} {'CPU-s/page':>10s} {'share':>6s} {'1st call CPU s':>14s}"
    log(header)
    log("-" * len(header))
    for name, row in s["stages"].items():
        first = f"{row['first_call_cpu_s']:14.2f}" if "first_call_cpu_s" in row else ""
        log(
            f"{name:18s} {row['wall_s']:7.1f} {row['cpu_s']:7.1f} {row['cpu_s_per_page']:10.3f} {row['share']:6.1%} "
            f"{first}"
        )
    log(f"{'total':18s} {'':7s} {'':7s} {s['cpu_s_per_page']:10.3f} {1:6.1%}")
    log(
        f"render and paginate: one measured subprocess tree, split {1 - s['paginate_share_of_render_time']:.0%} / "
        f"{s['paginate_share_of_render_time']:.0%} by the documents' timings; evidence sampling: "
        f"{s['evidence_configs']} configurations, its encoder's load {s['encoder_load']['cpu_s']:.1f} CPU-s apart "
        f"(once per build); load average {bench_build._load(figures['load_after_stages'])} after"
    )

    b = figures["builds"]
    cores = figures["machine_cores"]
    log("")
    log(f"2. The build end to end, queries=none, on this machine's {cores} cores")
    header = (
        f"{'run':40s} {'wall s':>7s} {'CPU s':>7s} {'busy':>5s} {'speed-up':>8s} {'effic.':>6s} {'of bound':>14s} "
        f"{'CPU vs 1':>8s} "
        f"{'PSS MiB':>7s} {'load':>9s}  fingerprint"
    )
    log(header)
    log("-" * len(header))
    rows = [(f"plain: one process, {cores} cores", b["plain"])]
    for k, row in b["arrays"].items():
        kind = "" if k == 1 and not row["array_tasks"] else f", {k}-task array"  # build.shards=1: one process
        rows.append((f"build.shards={k}{kind}, {'1 core' if k == 1 else f'{cores} cores'}", row))
    for name, row in rows:
        speedup = f"{row['speedup']:7.2f}x" if "speedup" in row else ""
        efficiency = f"{row['efficiency']:6.0%}" if "efficiency" in row else ""
        of_bound = f"{row['of_bound']:4.0%} of {row['bound']:.2f}x" if "of_bound" in row else ""
        overhead = f"{row['cpu_over_one_worker']:+8.1%}" if "cpu_over_one_worker" in row else ""
        log(
            f"{name:40s} {row['wall_s']:7.1f} {row['cpu_s']:7.1f} {row['cores_busy']:5.2f} {speedup:>8s} "
            f"{efficiency:>6s} {of_bound:>14s} {overhead:>8s} {row['peak_pss_mib']:7.0f} "
            f"{row['load_start']:4.1f}-{row['load_end']:<4.1f}  {row['fingerprint'][:16]}"
        )
    if not b["arrays"]:
        log("no sharded build in this checkout (build.shards): speed-ups not measured")
    else:
        fingerprints = {row["fingerprint"] for _, row in rows}
        log(f"fingerprints: {'all equal' if len(fingerprints) == 1 else 'DIFFER'} ({len(rows)} builds)")
        for k, row in b["arrays"].items():
            if row.get("split_bound"):
                log(
                    f"build.shards={k}: shards of {'/'.join(map(str, row['shard_pages']))} pages (at most "
                    f"{row['split_bound']:.2f}x from this split); the array {row['array_wall_s']:.1f} s of the "
                    f"build's {row['wall_s']:.1f} s"
                )
        over = [k for k in b["arrays"] if k > cores]
        if over:
            log(
                f"{', '.join(map(str, over))} workers on {cores} cores: the speed-up cannot pass {cores}x "
                "(the tasks share the cores; efficiency against linear is bounded by cores / workers)"
            )
    log(
        "speed-up = wall(1 worker) / wall(K); efficiency = speed-up / K; CPU vs 1 = the array's CPU over the "
        "one-worker build's\n(the sharding's overhead: the tasks' start-ups and browser launches, the driver's "
        "checks); busy = CPU s / wall s"
    )

    p = figures["projection"]
    log("")
    log(f"3. Projection: the paper's corpus, {p['documents']:,} documents, {p['pages']:,} pages ({p['from']})")
    log(
        f"CPU: {p['cpu_hours']:,.0f} CPU-hours ({p['parallel_cpu_hours']:,.0f} in the shards' stages: "
        f"{', '.join(SHARD_STAGES)}; {p['serial_cpu_hours']:,.1f} in the driver's, one process after the array)"
    )
    if p["efficiency"] is not None:
        k = max(k for k in b["arrays"] if k <= cores)
        sharded = f"{p['efficiency']:.0%} of bound, {k} workers"
    else:
        sharded = "not measured: 100% assumed"
    header = f"{'build':46s} {'cores':>6s}  {'efficiency':32s} {'wall':>10s}"
    log(header)
    log("-" * len(header))
    for name, n, efficiency, wall in [
        (f"sharded: one-core tasks on {p['nodes']:,} nodes", p["cores"], sharded, p["sharded_wall_s"]),
        ("sharded, linear", p["cores"], "100%", p["linear_wall_s"]),
        (
            f"one process on one {p['cores_per_node']}-core node",
            p["cores_per_node"],
            f"{p['single_use']:.0%}, the plain build's cores busy",
            p["single_wall_s"],
        ),
    ]:
        log(f"{name:46s} {n:6,d}  {efficiency:32s} {_duration(wall):>10s}")
    log("wall = shard stages' CPU / (cores x efficiency) + driver stages' CPU (one process, after the array)")
    log(f"load average {bench_build._load(figures['load_end'])} at the end (other work slows all figures)")


if __name__ == "__main__":
    sys.exit(main())

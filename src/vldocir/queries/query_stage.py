"""The query stage of a build, the paper's way (§3.3-3.4): evidence configurations -> two-step VLM
generation -> deterministic filter -> LLM cleaning -> the ``queries`` and ``qrels`` tables.

:class:`GeneratedQueries` (``conf/queries/generated.yaml``) runs the stage over a rendered
benchmark's tables. Its report lands in ``benchmark.json`` (``built_by.queries``): configurations per
source x structure, generation outputs kept and discarded per reason, queries before and after the
filter and the cleaning, removals per reason, unusable answers, and tokens and cost per model. With
``record_dir`` it also keeps every configuration, model output and candidate query with its fate
(``configs.parquet``, ``outputs.jsonl``, ``candidates.jsonl``), for audits and prompt work.

**Recorded answers** (``recorded``: a JSON file) are replayed from a chat server started on
127.0.0.1 (:func:`vldocir.llm_server.replay_server`), so the whole stage (HTTP, retries, cache,
parsing) runs offline exactly as with a model. The file names its ``generator``, which must be the
model name of every client: recorded answers never pass for a served model's. It holds
``describe`` (page id -> description), ``generate`` (configuration signature -> answer) and
``clean`` (question -> ``{"rating": ..., "classifier": ...}``); a request without a recording gets
HTTP 404, fails, and is counted like any failed request. The mini benchmark is built this way from
``data/generation/vl-docir-mini.recorded-by-hand.json`` (answers written by hand, not by a model).

**Pre-flight** (:meth:`GeneratedQueries.preflight`, called before any rendering): with a server,
every distinct server and model is asked once whether it serves the model
(:meth:`vldocir.llm.ChatClient.check_server`); with a recording, the file is read, its generator
checked, and a recording that names none of the input documents is refused. Either way a stage
that cannot work fails in seconds with one line saying what to do.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from vldocir.data.schema import EVIDENCE_STRUCTURES
from vldocir.errors import ConfigError
from vldocir.io import atomic_path, atomic_write_json, atomic_write_parquet, file_digest
from vldocir.llm import ChatClient
from vldocir.llm_server import replay_server, request_digest
from vldocir.queries.cleaning import (
    BUILD_TASKS,
    LLMJudge,
    QueryCleaningSpec,
    clean_generated_queries,
    cleaning_frame,
)
from vldocir.queries.evidence_configs import EvidenceSamplingSpec, config_counts, sample_evidence_configs
from vldocir.queries.vlm_generation import (
    GenerationSpec,
    QueryGenerator,
    candidate_records,
    describe_pages,
    generate_queries,
    usage_report,
)

log = logging.getLogger(__name__)


class Replay:
    """Recorded answers for the requests about to be sent, served by :func:`replay_server`."""

    def __init__(self, path: str | Path, clients: list[ChatClient]):
        self.path = Path(path)
        try:
            self.recorded = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ConfigError(f"queries.recorded: cannot read recorded answers {self.path}: {error}") from error
        generator = self.recorded.get("generator")
        wrong = sorted({c.model for c in clients if c.model != generator})
        if not generator or wrong:
            raise ConfigError(
                f"recorded answers in {self.path} are by {generator!r} but the clients' model is {wrong}; "
                "set queries.llm.model to the recording's generator (or queries.recorded=null to ask a server)"
            )
        self.answers: dict[str, str] = {}
        self.missing: Counter = Counter()
        self.server = replay_server(self.answers, models=[generator])

    def documents(self) -> set[str]:
        """The document ids the recording's ``describe`` and ``generate`` keys name: page ids
        (``data.evidence.page_id``: ``<doc_id>-p<NNN>``) and configuration signatures
        (``vlm_generation.config_signature``: ``<structure>|<doc_id>:<page>+...``)."""
        described = {str(key).rsplit("-p", 1)[0] for key in self.recorded.get("describe") or {}}
        generated = {
            part.rsplit(":", 1)[0]
            for key in self.recorded.get("generate") or {}
            for part in str(key).partition("|")[2].split("+")
            if part
        }
        return described | generated

    def expect(self, step: str, keys: list[Any], requests: list) -> None:
        """Make the recorded answer of each ``(key, request)`` the server's answer to that request."""
        section = self.recorded.get(step, {})
        for key, request in zip(keys, requests, strict=True):
            if step == "clean":
                question, task = key
                content = section.get(question, {}).get(task)
            else:
                content = section.get(key)
            if content is None:
                self.missing[step] += 1
            else:
                self.answers[request_digest(request)] = str(content)

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.path.name,
            "sha256": file_digest(self.path),
            "generator": self.recorded["generator"],
            "requests_without_recording": dict(self.missing),
        }


class GeneratedQueries:
    """The query stage: call with a rendered benchmark's tables (Hydra target of ``conf/queries/generated.yaml``).

    Args:
        sampling, generation, cleaning: the three steps' specs.
        describer, generator: the VLM clients of the two generation steps; judge: the cleaning LLM
            (``None`` with ``cleaning.method=none``).
        encoder: embeds document start texts for Cross-Doc pairs (``None``: no Cross-Doc queries).
        recorded: a recorded-answers file to replay (module doc), or ``None`` to ask the servers.
        check_server: with ``recorded=None``, :meth:`preflight` asks each server whether it serves
            the model; ``False`` skips that (a rerun answered from the LLM cache with the server down).
        llm: the client settings the config's three client nodes share by interpolation (model,
            server, cache); recorded in the report, not used otherwise.
    """

    def __init__(
        self,
        sampling: EvidenceSamplingSpec,
        generation: GenerationSpec,
        cleaning: QueryCleaningSpec,
        describer: ChatClient,
        generator: ChatClient,
        judge: ChatClient | None = None,
        encoder=None,
        recorded: str | Path | None = None,
        progress: bool = True,
        llm: Mapping[str, Any] | None = None,
        check_server: bool = True,
    ):
        self.sampling, self.generation, self.cleaning = sampling, generation, cleaning
        self.describer, self.generator, self.judge = describer, generator, judge
        self.encoder, self.recorded, self.progress = encoder, recorded, progress
        self.check_server = bool(check_server)
        if cleaning.method != "none" and judge is None:
            raise ConfigError(f"queries.cleaning.method={cleaning.method} needs queries.judge (an LLM client)")

    def clients(self) -> list[ChatClient]:
        """The clients the stage will call: describer, generator, and the judge when it cleans."""
        judge = self.judge if self.cleaning.method != "none" else None
        return [c for c in (self.describer, self.generator, judge) if c is not None]

    def preflight(self, doc_ids: Sequence[str] | None = None) -> None:
        """Raise :class:`ConfigError` (one line, with what to do) before any work if the stage
        cannot run (module doc). ``doc_ids``: the documents the build will hold, when known before
        rendering (a folder of the user's files); ``None`` checks a recording only for its form."""
        if not self.recorded:
            seen = set()
            for client in self.clients() if self.check_server else ():
                if (client.base_url, client.model) in seen:
                    continue
                seen.add((client.base_url, client.model))
                try:
                    client.check_server()
                except ConfigError as error:
                    raise ConfigError(
                        f"queries.llm: {error}; start the server or fix queries.llm.base_url / queries.llm.model, "
                        "or build without a model: queries=file queries.path=<your queries> or queries=none "
                        "(a rerun that the LLM cache answers: queries.check_server=false)"
                    ) from None
            return
        replay = Replay(self.recorded, [c for c in (self.describer, self.generator, self.judge) if c is not None])
        if doc_ids is None:
            return
        doc_ids = set(map(str, doc_ids))
        covered = doc_ids & replay.documents()
        if not covered:
            example = f" (e.g. {sorted(doc_ids)[0]})" if doc_ids else ""
            raise ConfigError(
                f"queries.recorded: {replay.path.name} holds recorded answers for none of the {len(doc_ids)} "
                f"input document(s){example}: it replays the answers recorded for the documents it was written "
                "for. Give your own queries (queries=file queries.path=<jsonl|csv|parquet>), build without "
                "queries (queries=none), or ask a model (queries.recorded=null queries.llm.model=<model> "
                "queries.llm.base_url=<server>/v1)"
            )
        if len(covered) < len(doc_ids):
            log.warning(
                "%s holds recorded answers for %d of %d input documents; requests about the others get none",
                replay.path.name,
                len(covered),
                len(doc_ids),
            )

    def sample(
        self, documents: pd.DataFrame, pages: pd.DataFrame, elements: pd.DataFrame, near_max_gap: int
    ) -> pd.DataFrame:
        """The evidence configurations the stage generates for (deterministic: seeded)."""
        return sample_evidence_configs(documents, pages, elements, self.sampling, self.encoder, near_max_gap)

    @contextmanager
    def _session(self) -> Iterator[tuple[list[ChatClient], Replay | None]]:
        """The clients to call (describer, generator[, judge]): with ``recorded``, this process's own
        replay server's, whose answers are keyed apart from a served model's."""
        clients = [c for c in (self.describer, self.generator, self.judge) if c is not None]
        if not self.recorded:
            yield clients, None
            return
        replay = Replay(self.recorded, clients)
        with replay.server as server:
            log.info("replaying recorded answers from %s through %s", replay.path, server.url)
            recording = f"{replay.path.name}@{file_digest(replay.path)[:16]}"  # a new recording: new cache keys
            yield [c.with_base_url(server.url, answers_from=recording) for c in clients], replay

    def _query_generator(self, clients: list[ChatClient], replay: Replay | None) -> QueryGenerator:
        return QueryGenerator(
            self.generation, clients[0], clients[1], self.progress, before_requests=replay.expect if replay else None
        )

    def _generate_and_clean(self, clients, replay, configs, documents, elements, images, near_max_gap):
        """Generation over ``configs``, then the cleaning of what the filter kept: ``(result, removed, report)``."""
        result = generate_queries(
            self._query_generator(clients, replay), configs, documents, elements, images, near_max_gap
        )
        judge = clients[2] if len(clients) > 2 else None
        judge_obj = LLMJudge(judge, progress=self.progress) if judge is not None else None
        if replay is not None and judge_obj is not None and self.cleaning.method != "none":
            frame = cleaning_frame(result.queries)
            tasks = BUILD_TASKS[self.cleaning.method]
            keys = [(q, t) for t in ("rating", "classifier") if t in tasks for q in frame["question"]]
            replay.expect("clean", keys, judge_obj.requests(frame, tasks))
        removed, cleaning_report = clean_generated_queries(judge_obj, result.queries, self.cleaning)
        return result, removed, cleaning_report

    def for_requests(self) -> GeneratedQueries:
        """A copy of this stage without its encoder, for a shard task (:meth:`prefetch`), pickled or
        run in this process: its clients are copies, counting their own usage."""
        stage = copy.copy(self)
        stage.encoder = None
        return copy.deepcopy(stage)

    def prefetch(
        self,
        documents: pd.DataFrame,
        elements: pd.DataFrame,
        images: Mapping[str, bytes | Path | str],
        near_max_gap: int,
        configs: pd.DataFrame | None = None,
        page_ids: Sequence[str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Make the model requests :meth:`__call__` makes, into the LLM cache, for part of the work
        (``build.shards=N``: one shard task's part): the descriptions of ``page_ids``, or the
        generation and cleaning requests of ``configs`` (a subset of :meth:`sample`'s, whose pages
        are described already). The same code as :meth:`__call__`: its requests, hence its cache
        keys, are the same. Returns the usage (:func:`usage_report`) per client role."""
        with self._session() as (clients, replay):
            if page_ids is not None:
                if self.generation.describe:
                    describe_pages(self._query_generator(clients, replay), list(page_ids), images)
                roles = {"describer": clients[0]}
            else:
                self._generate_and_clean(clients, replay, configs, documents, elements, images, near_max_gap)
                roles = dict(zip(("describer", "generator", "judge"), clients, strict=False))
        prices = self.generation.prices_per_million_tokens
        return {role: usage_report(client, prices) for role, client in roles.items()}

    def __call__(
        self,
        documents: pd.DataFrame,
        pages: pd.DataFrame,
        elements: pd.DataFrame,
        images: Mapping[str, bytes | Path | str],
        near_max_gap: int,
        record_dir: str | Path | None = None,
    ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
        """``(queries, qrels, report)``; ``images``: page id -> its full-size image (bytes or file)."""
        configs = self.sample(documents, pages, elements, near_max_gap)
        log.info("%d evidence configurations", len(configs))
        with self._session() as (clients, replay):
            result, removed, cleaning_report = self._generate_and_clean(
                clients, replay, configs, documents, elements, images, near_max_gap
            )
        judge = clients[2] if len(clients) > 2 else None

        if removed.all():
            raise ConfigError(_no_queries(result.report, replay, len(configs)))
        queries = result.queries[~removed].reset_index(drop=True)
        renumber = {old: f"q{i:07d}" for i, old in enumerate(queries["query_id"])}
        queries["query_id"] = queries["query_id"].map(renumber)
        qrels = result.qrels[result.qrels["query_id"].isin(renumber)].copy()
        qrels["query_id"] = qrels["query_id"].map(renumber)
        qrels = qrels.reset_index(drop=True)

        fates = dict(zip(result.queries["query_id"], ["cleaning" if r else "kept" for r in removed], strict=True))
        usage = {**result.report.pop("usage")}
        if judge is not None:
            usage["judge"] = usage_report(judge, self.generation.prices_per_million_tokens)
        final = queries["evidence_structure"].value_counts()
        report = {
            "method": "generated",
            "configs": {s: {e: int(n) for e, n in row.items()} for s, row in config_counts(configs).iterrows()},
            "configs_total": len(configs),
            "sampling": asdict(self.sampling),
            **result.report,
            "cleaning": cleaning_report,
            "counts": {
                "generated": len(result.candidates),
                "after_filter": len(result.queries),
                "after_cleaning": len(queries),
                "per_structure": {s: int(final.get(s, 0)) for s in EVIDENCE_STRUCTURES},
            },
            "usage": usage,
            "recorded": replay.describe() if replay is not None else None,
        }
        if record_dir is not None:
            log.info("generation record (configurations, outputs, candidates): %s", record_dir)
            _write_record(Path(record_dir), configs, result, fates, renumber, report)
        return queries, qrels, report


def _no_queries(generation: Mapping[str, Any], replay: Replay | None, n_configs: int) -> str:
    """Why no query survived, and what to do about it."""
    discarded = {k: v for k, v in generation["outputs"]["discarded"].items() if v}
    text = f"no query survived generation over {n_configs} configuration(s): outputs discarded {discarded or 'none'}"
    if replay is not None and replay.missing:
        text += (
            f"; {sum(replay.missing.values())} request(s) had no recorded answer in {replay.path.name} "
            "(queries.recorded replays a recording; set queries.recorded=null and queries.llm.* to ask a server)"
        )
    elif discarded.get("request_failed"):
        text += "; check queries.llm.base_url and queries.llm.model (the server must be reachable and serve that model)"
    return text


def _write_record(
    out: Path, configs: pd.DataFrame, result, fates: dict[str, str], renumber: dict[str, str], report: dict[str, Any]
) -> None:
    """``configs.parquet``, ``outputs.jsonl``, ``candidates.jsonl`` (fate: a discard reason, ``cleaning``,
    or the final query id) and ``report.json`` in ``out``."""
    import pyarrow as pa

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(pa.Table.from_pandas(configs, preserve_index=False), out / "configs.parquet")
    with atomic_path(out / "outputs.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in result.outputs.to_dict("records")))
    records = candidate_records(result.candidates)
    for record in records:
        record["fate"] = record["discard"] or (
            renumber.get(record["query_id"]) or fates.get(record["query_id"], "kept")
        )
    with atomic_path(out / "candidates.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
    atomic_write_json(report, out / "report.json")


def page_images(root: Path, pages: pd.DataFrame) -> dict[str, bytes | Path]:
    """Page id -> its stored image (inline bytes, or the file under ``root``) for a loaded benchmark."""
    images: dict[str, bytes | Path] = {}
    for pid, image in zip(pages["page_id"], pages["image"], strict=True):
        if isinstance(image, Mapping) and image.get("bytes"):
            images[pid] = image["bytes"]
        elif isinstance(image, Mapping) and image.get("path"):
            images[pid] = root / str(image["path"])
    return images


def regenerate_queries(
    source: str | Path,
    out_dir: str | Path,
    stage: GeneratedQueries,
    name: str | None = None,
    record_dir: str | Path | None = None,
):
    """Write a copy of the rendered benchmark at ``source`` into ``out_dir`` (tables and page images)
    whose queries and qrels are made by ``stage``; returns the loaded new benchmark. Its
    ``benchmark.json`` keeps the source's build record and adds ``built_by.queries`` (the report)
    and ``built_by.queries_over`` (the source's name and fingerprint)."""
    from vldocir.data.benchmark import load_benchmark, write_benchmark
    from vldocir.queries.evidence_configs import benchmark_near_max_gap

    bench = load_benchmark(source)
    out_dir = Path(out_dir)
    if out_dir.resolve() == bench.root.resolve():
        raise ConfigError(f"out_dir {out_dir} is the source benchmark: write the new one elsewhere")
    if bench.elements.empty:
        raise ConfigError(f"{bench.root} has no elements table: query generation needs a rendered benchmark")
    pages = bench.pages
    images = page_images(bench.root, pages)
    queries, qrels, report = stage(
        bench.documents, pages, bench.elements, images, benchmark_near_max_gap(bench.info), record_dir=record_dir
    )
    for image in pages["image"]:
        if isinstance(image, Mapping) and image.get("path") and not image.get("bytes"):
            target = out_dir / str(image["path"])
            if not target.exists():  # written whole or not at all: a killed copy is not taken for an image
                target.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(target) as tmp:
                    tmp.write_bytes((bench.root / str(image["path"])).read_bytes())
    info = {k: v for k, v in bench.info.items() if k not in ("counts", "fingerprint")}
    info["name"] = name or bench.name
    info["built_by"] = {
        **info.get("built_by", {}),
        "queries": report,
        "queries_over": {"name": bench.name, "fingerprint": bench.fingerprint},
    }
    tables = {
        "documents": bench.documents,
        "pages": pages,
        "elements": bench.elements,
        "queries": queries,
        "qrels": qrels,
    }
    return write_benchmark(out_dir, tables, info)


def summary(report: Mapping[str, Any]) -> str:
    """The report in a few lines: outputs and queries per step and reason, tokens and cost."""
    outputs, counts, cleaning = report["outputs"], report["counts"], report["cleaning"]
    reasons = lambda d: ", ".join(f"{k} {v}" for k, v in d.items() if v) or "none"  # noqa: E731
    lines = [
        f"configurations {report['configs_total']}; "
        f"outputs valid {outputs['valid']} of {outputs['requested']} (discarded: {reasons(outputs['discarded'])})",
        f"queries generated {counts['generated']}, after the filter {counts['after_filter']} "
        f"(dropped: {reasons(report['queries']['discarded'])}), "
        f"after cleaning ({cleaning['method']}) {counts['after_cleaning']} "
        f"(removed: {reasons(cleaning.get('removed', {}))})",
        "per structure: " + ", ".join(f"{k} {v}" for k, v in counts["per_structure"].items()),
    ]
    for role, usage in report["usage"].items():
        cost = "" if usage.get("cost_usd") is None else f", ${usage['cost_usd']:.4f}"
        lines.append(
            f"{role} ({usage['model']}): {usage['called']} asked, {usage['cached']} replayed from cache, "
            f"{usage['failed']} failed, {usage['retries']} retries, "
            f"{usage['prompt_tokens']}+{usage['completion_tokens']} tokens{cost}"
        )
    return "\n".join(lines)

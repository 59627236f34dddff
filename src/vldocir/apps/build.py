"""Entry point of the construction pipeline: build a rendered benchmark from generated HTML, or from
your own HTML and PDF documents, a folder of them or a document index (construction/ingest.py).

    python -m vldocir.apps.build                                   # the mini benchmark at full size (make mini)
    python -m vldocir.apps.build input=/data/my-docs spec.name=my-bench queries=file queries.path=/data/q.jsonl
    python -m vldocir.apps.build input=/data/my-docs spec.name=my-corpus queries=none   # the corpus alone
    python -m vldocir.apps.build input=/data/raw/sec spec.name=my-sec queries.recorded=null \
        queries.llm.model=Qwen/Qwen3-VL-32B-Instruct queries.llm.base_url=http://gpu-node:8000/v1
    python -m vldocir.apps.build spec.documents.sec=20 spec.name=my-bench
    python -m vldocir.apps.build queries=templates                 # template queries over planted facts, no LLM
    python -m vldocir.apps.build queries.recorded=null queries.llm.model=Qwen/Qwen3-VL-32B-Instruct \
        queries.llm.base_url=http://gpu-node:8000/v1  # generate with a served VLM
    python -m vldocir.apps.build input=/data/my-docs queries=none build.shards=64 hydra/launcher=slurm_cpu
    python -m vldocir.apps.build input=/data/my-docs queries=none build.shards=4 hydra/launcher=submitit_local \
        hydra.launcher.cpus_per_task=1     # rendering and OCR as a job array (docs/construction-at-scale.md)

The query stage's ``preflight`` (a server, a recording, a query file) runs before any rendering.
Nothing is left behind by a build that fails or is stopped: the benchmark is written in a staging
folder beside ``out_dir`` and renamed into place once complete (renders stay in the cache for the
rerun); SIGTERM is a clean exit (status 143) that kills Tesseract and the browser and removes the
staging folder, which a watcher process removes after a SIGKILL too; the children end with the build
(:mod:`vldocir.subprocesses`); a sharded build's tasks are jobs of their own (``docs/construction-at-scale.md``).
"""

from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("build", config_name="build")
def main(cfg: DictConfig) -> None:
    from vldocir.subprocesses import remove_staging_when_gone, sigterm_as_interrupt

    with sigterm_as_interrupt():
        remove_staging_when_gone(cfg.out_dir)
        build(cfg)


def build(cfg: DictConfig) -> None:
    from vldocir.construction.build_generated import build_rendered_benchmark
    from vldocir.construction.ingest import build_from_html

    queries = instantiate(cfg.queries) if cfg.queries.get("_target_") else None  # queries=templates: none
    common = dict(render=instantiate(cfg.render), images=instantiate(cfg.images), ocr=instantiate(cfg.ocr))
    common["shards"] = shard_stages(cfg)
    if common["shards"] is not None and queries is not None:  # what the query arrays need: checked before any work
        common["shards"].check_queries(queries)
    if cfg.input:  # your own HTML and PDF documents: a folder of them or a document index
        bench = build_from_html(  # (runs the query stage's preflight once the documents are known)
            cfg.input,
            cfg.out_dir,
            cfg.paths.cache_dir,
            cfg.spec.name,
            queries,
            near_max_gap=cfg.spec.near_max_gap,
            pdf=instantiate(cfg.pdf),
            source=cfg.folder.source,
            domain=cfg.folder.domain,
            links=cfg.folder.links,
            with_ocr=cfg.spec.ocr,
            **common,
        )
    else:  # generated HTML (the mini benchmark and its kind)
        preflight = getattr(queries, "preflight", None)
        if preflight is not None:  # before the rendering: the documents' ids are not known yet
            preflight(None)
        bench = build_rendered_benchmark(
            instantiate(cfg.spec), cfg.out_dir, cfg.paths.cache_dir, queries=queries, **common
        )
    if queries is not None:
        from vldocir.queries.user_queries import query_summary

        print(query_summary(queries, bench.info["built_by"]["queries"]))
    from vldocir.construction.build_report import ocr_summary
    from vldocir.construction.build_report import summary as build_report

    print(build_report(bench.info["built_by"]))  # per-document warnings, left-out documents, sampling shortfall
    if (ocr_line := ocr_summary(bench.info["built_by"])) is not None:
        print(ocr_line)
    if "shards" in bench.info["built_by"]:
        from vldocir.construction.shards import shards_line

        print(shards_line(bench.info["built_by"]["shards"]))
    print(f"built {bench.name} in {bench.root}: {bench.info['counts']} (fingerprint {bench.fingerprint})")


def shard_stages(cfg: DictConfig):
    """The job array of ``build.shards=N`` (:class:`~vldocir.construction.shards.ShardedStages`), run
    through the composed ``hydra.launcher``; ``None`` for one process (``build.shards=1``)."""
    from vldocir.construction.shards import ShardedStages

    if cfg.build.shards == 1:
        return None
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    hydra = HydraConfig.get()
    # The launcher's values may name the job's config (slurm_*.yaml: ${paths.root_dir}): resolved in both.
    whole = OmegaConf.create({**OmegaConf.to_container(cfg, resolve=False), "hydra": {}})
    whole.hydra = OmegaConf.to_container(hydra, resolve=False)
    launcher = OmegaConf.to_container(whole.hydra.launcher, resolve=True)
    return ShardedStages(
        cfg.build.shards,
        launcher,
        Path(hydra.runtime.output_dir) / "shards",
        leases=OmegaConf.to_container(cfg.leases, resolve=True),
    )


if __name__ == "__main__":
    main()

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

The query stage's ``preflight`` (a server, a recording, a query file) runs before any rendering.
Nothing is left behind by a build that fails or is stopped: the benchmark is written in a staging
folder beside ``out_dir`` and renamed into place once complete (renders stay in the cache for the
rerun); SIGTERM is a clean exit (status 143) that kills Tesseract and the browser and removes the
staging folder, which a watcher process removes after a SIGKILL too; the children end with the build
(:mod:`vldocir.subprocesses`).
"""

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

    print(build_report(bench.info["built_by"]))
    if (ocr_line := ocr_summary(bench.info["built_by"])) is not None:
        print(ocr_line)  # per-document warnings, left-out documents, sampling shortfall
    print(f"built {bench.name} in {bench.root}: {bench.info['counts']} (fingerprint {bench.fingerprint})")


if __name__ == "__main__":
    main()

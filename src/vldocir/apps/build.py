"""Entry point of the construction pipeline: build a rendered benchmark from generated HTML, or from
your own HTML documents listed in a document index (construction/ingest.py).

    python -m vldocir.apps.build                                   # the mini benchmark at full size (make mini)
    python -m vldocir.apps.build input=/data/raw/sec spec.name=my-sec queries.recorded=null \
        queries.llm.model=Qwen/Qwen3-VL-32B-Instruct queries.llm.base_url=http://gpu-node:8000/v1
    python -m vldocir.apps.build spec.documents.sec=20 spec.name=my-bench
    python -m vldocir.apps.build queries=templates                 # template queries over planted facts, no LLM
    python -m vldocir.apps.build queries.recorded=null queries.llm.model=Qwen/Qwen3-VL-32B-Instruct \
        queries.llm.base_url=http://gpu-node:8000/v1  # generate with a served VLM
"""

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("build", config_name="build")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.build_generated import build_rendered_benchmark
    from vldocir.construction.ingest import build_from_html

    queries = instantiate(cfg.queries) if cfg.queries.get("_target_") else None  # queries=templates: none
    common = dict(render=instantiate(cfg.render), images=instantiate(cfg.images), ocr=instantiate(cfg.ocr))
    if cfg.input:  # your own HTML and PDF documents, listed in a document index
        bench = build_from_html(
            cfg.input,
            cfg.out_dir,
            cfg.paths.cache_dir,
            cfg.spec.name,
            queries,
            near_max_gap=cfg.spec.near_max_gap,
            pdf=instantiate(cfg.pdf),
            **common,
        )
    else:  # generated HTML (the mini benchmark and its kind)
        bench = build_rendered_benchmark(
            instantiate(cfg.spec), cfg.out_dir, cfg.paths.cache_dir, queries=queries, **common
        )
    if queries is not None:
        from vldocir.construction.query_stage import summary

        print(summary(bench.info["built_by"]["queries"]))
    print(f"built {bench.name} in {bench.root}: {bench.info['counts']} (fingerprint {bench.fingerprint})")


if __name__ == "__main__":
    main()

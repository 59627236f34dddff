"""Entry point of the query stage over an already rendered benchmark: VLM generation (paper
§3.3-3.4: evidence configurations, two-step generation, the deterministic filter and LLM cleaning)
or the user's own queries from a file (conf/queries), written as a copy of the benchmark with the
new queries and qrels.

    python -m vldocir.apps.generate_queries      # the shipped mini, its recorded answers replayed offline
    python -m vldocir.apps.generate_queries benchmark=/data/my-bench name=my-bench-qwen queries.recorded=null \\
        queries.llm.model=Qwen/Qwen3-VL-32B-Instruct queries.llm.base_url=http://gpu-node:8000/v1
    python -m vldocir.apps.generate_queries benchmark=/data/my-corpus name=my-bench queries=file queries.path=q.jsonl

vldocir.apps.build runs the same stage inside a build; this entry re-asks another model over the same
pages, or puts your queries on a corpus built with queries=none. The stage's ``preflight`` runs first.
"""

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("generate_queries", config_name="generate_queries")
def main(cfg: DictConfig) -> None:
    from vldocir.data.benchmark import load_benchmark
    from vldocir.queries.query_stage import regenerate_queries
    from vldocir.queries.user_queries import query_summary

    stage = instantiate(cfg.queries)
    preflight = getattr(stage, "preflight", None)
    if preflight is not None:  # a server down, a recording or a query file for other documents: before the work
        preflight(list(load_benchmark(cfg.benchmark).documents["doc_id"]))
    bench = regenerate_queries(cfg.benchmark, cfg.out_dir, stage, cfg.name, cfg.record_dir)
    print(query_summary(stage, bench.info["built_by"]["queries"]))
    print(f"wrote {bench.name} to {bench.root}: {bench.info['counts']} (fingerprint {bench.fingerprint})")


if __name__ == "__main__":
    main()

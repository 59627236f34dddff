"""Entry point of query generation over an already rendered benchmark (paper §3.3-3.4): evidence
configurations, two-step VLM generation, the deterministic filter and LLM cleaning (conf/queries),
written as a copy of the benchmark with the new queries and qrels.

    python -m vldocir.apps.generate_queries      # the shipped mini, its recorded answers replayed offline
    python -m vldocir.apps.generate_queries benchmark=/data/my-bench name=my-bench-qwen queries.recorded=null \\
        queries.llm.model=Qwen/Qwen3-VL-32B-Instruct queries.llm.base_url=http://gpu-node:8000/v1

vldocir.apps.build runs the same stage inside a build; this entry re-asks another model over the same pages.
"""

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("generate_queries", config_name="generate_queries")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.query_stage import regenerate_queries, summary

    bench = regenerate_queries(cfg.benchmark, cfg.out_dir, instantiate(cfg.queries), cfg.name, cfg.record_dir)
    print(summary(bench.info["built_by"]["queries"]))
    print(f"wrote {bench.name} to {bench.root}: {bench.info['counts']} (fingerprint {bench.fingerprint})")


if __name__ == "__main__":
    main()

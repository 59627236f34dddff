"""Entry point of query generation over an already rendered benchmark (paper §3.3-3.4): evidence
configurations, two-step VLM generation, the deterministic filter and LLM cleaning (conf/queries),
written as a copy of the benchmark with the new queries and qrels.

    python -m vldocir.apps.generate_queries                                # the shipped mini, its recorded answers replayed offline
    python -m vldocir.apps.generate_queries benchmark=/data/my-bench name=my-bench-qwen queries.recorded=null \\
        queries.llm.model=Qwen/Qwen3-VL-32B-Instruct queries.llm.base_url=http://gpu-node:8000/v1

vldocir.apps.build runs the same stage inside a build; this entry re-asks another model over the same pages.
"""

import sys

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps import CONFIG_DIR


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="generate_queries")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.query_stage import regenerate_queries, summary
    from vldocir.errors import ConfigError

    try:
        bench = regenerate_queries(cfg.benchmark, cfg.out_dir, instantiate(cfg.queries), cfg.name, cfg.record_dir)
    except ConfigError as error:
        print(f"query generation error: {error}", file=sys.stderr)
        sys.exit(2)
    print(summary(bench.info["built_by"]["queries"]))
    print(f"wrote {bench.name} to {bench.root}: {bench.info['counts']} (fingerprint {bench.fingerprint})")


if __name__ == "__main__":
    from vldocir.launch import refuse_secret_overrides

    refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
    main()

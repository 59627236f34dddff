"""Entry point of document collection (paper App. A.1): one source per run, into a folder of
``index.jsonl`` + ``<doc_id>/index.html`` with its local assets; rerun the same command to resume.

    python -m vldocir.apps.collect collect=wikipedia                    # seeds, link expansion, LLM relevance filter
    python -m vldocir.apps.collect collect=arxiv collect.max_documents=100
    python -m vldocir.apps.collect collect=pubmed collect.collector.date_from=2024-01-01 collect.collector.date_until=2024-01-31
    VLDOCIR_SEC_USER_AGENT="Example Lab admin@example.org" python -m vldocir.apps.collect collect=sec collect.out_dir=/data/raw/sec

The sources' APIs, politeness and resume rules: src/vldocir/construction/collect/ (conf/collect.yaml,
conf/collect/<source>.yaml).
"""

import sys

import hydra
from omegaconf import DictConfig

from vldocir.apps import CONFIG_DIR


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="collect")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.collect import CollectError, IndexFileError, collect_from_config
    from vldocir.errors import ConfigError

    try:
        summary = collect_from_config(cfg.collect)
    except (ConfigError, IndexFileError) as error:
        print(f"collect error: {error}", file=sys.stderr)
        sys.exit(2)
    except CollectError as error:  # the source's listing could not be read
        print(f"collect error: {error}\nwhat was collected so far is kept; run the same command again to resume",
              file=sys.stderr)
        sys.exit(2)
    print(summary.report())


if __name__ == "__main__":
    from vldocir.launch import refuse_secret_overrides

    refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
    main()

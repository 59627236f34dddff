"""Entry point of document collection (paper App. A.1): one source per run, into a folder of
``index.jsonl`` + ``<doc_id>/index.html`` with its local assets; rerun the same command to resume.

    python -m vldocir.apps.collect collect=wikipedia    # seeds, link expansion, LLM relevance filter
    python -m vldocir.apps.collect collect=arxiv collect.max_documents=100
    python -m vldocir.apps.collect collect=pubmed collect.collector.date_from=2024-01-01 \
        collect.collector.date_until=2024-01-31
    VLDOCIR_SEC_USER_AGENT="Example Lab admin@example.org" python -m vldocir.apps.collect collect=sec \
        collect.out_dir=/data/raw/sec

The sources' APIs, politeness and resume rules: src/vldocir/construction/collect/ (conf/collect.yaml,
conf/collect/<source>.yaml). Exit status 2 with one line when an endpoint's host does not resolve
(before any request) or a run fetched nothing because every candidate failed or none was found.
"""

from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("collect", config_name="collect")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.collect import CollectError, collect_from_config

    try:
        summary = collect_from_config(cfg.collect)
    except CollectError as error:  # the source's listing could not be read
        raise CollectError(
            f"{error}; what was collected so far is kept: run the same command again to resume", error.reason
        ) from error
    print(summary.report())
    if (reason := summary.nothing_fetched()) is not None:  # every candidate failed, or there were none
        raise CollectError(reason)


if __name__ == "__main__":
    main()

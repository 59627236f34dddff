"""Entry point of the query audit (paper App. A.7, Table 12) and the bounding-box census.

    python -m vldocir.apps.audit             # sample + review sheet + HTML (the mini benchmark)
    python -m vldocir.apps.audit do=import   # filled sheet -> accuracy, Wilson 95%, census
    python -m vldocir.apps.audit do=import sheet=/path/filled.csv dataset=vldocir
    python -m vldocir.apps.audit do=census 'census.structures=[cross_doc]'

Its own entry (like vldocir.apps.cleaning_ablations), not a vldocir.apps.report step: it reads a
benchmark and a reviewer's sheet, not the results store's runs.
"""

from omegaconf import DictConfig, OmegaConf

from vldocir.apps.app import hydra_app


@hydra_app("audit", config_name="audit")
def main(cfg: DictConfig) -> None:
    from vldocir.data.benchmark import load_benchmark
    from vldocir.errors import ConfigError
    from vldocir.reporting import audit

    bench = load_benchmark(cfg.dataset.source, revision=cfg.dataset.revision, cache_dir=cfg.paths.cache_dir)
    structures = list(cfg.census.structures) if cfg.census.structures else None
    if cfg.do == "export":
        record = audit.export_review(bench, cfg.out_dir, OmegaConf.to_container(cfg.counts), cfg.seed)
        for stratum in record["strata"]:
            if stratum["short"]:
                print(
                    f"{stratum['source']} {stratum['evidence_structure']}: only {stratum['available']} queries, "
                    f"all taken ({stratum['requested']} asked for)"
                )
        print(f"sampled {len(record['query_ids'])} queries of {bench.name} (seed {cfg.seed})")
        print(f"review sheet: {cfg.out_dir}/{audit.SHEET_FILE} (fill verdict: correct|incorrect)")
        print(f"evidence pages: {cfg.out_dir}/{audit.REVIEW_DIR}/index.html")
        dataset = f" dataset={cfg.dataset.name}" if cfg.dataset.name != "vl-docir-mini" else ""
        print(f"then: python -m vldocir.apps.audit do=import{dataset}")
    elif cfg.do == "import":
        result = audit.import_review(bench, cfg.out_dir, cfg.sheet, cfg.confidence, structures, cfg.census.examples)
        print(audit.format_accuracy(result["accuracy"]))
        print()
        print(audit.format_census(result["census"]))
        print(f"wrote {cfg.out_dir}/report.json and report.md")
    elif cfg.do == "census":
        result = audit.census(bench, structures, cfg.census.examples)
        audit.write_report(
            cfg.out_dir, "census", f"Bounding-box census: {bench.name}", result, [audit.format_census(result)]
        )
        print(audit.format_census(result))
        print(f"wrote {cfg.out_dir}/census.json and census.md")
    else:
        raise ConfigError(f"do={cfg.do!r}: use export, import or census")


if __name__ == "__main__":
    main()

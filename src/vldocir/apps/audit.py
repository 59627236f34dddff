"""Entry point of the query audit (paper App. A.7, Table 12) and the bounding-box census.

    python -m vldocir.apps.audit                                     # sample + review sheet + HTML (the mini benchmark)
    python -m vldocir.apps.audit do=import                           # filled sheet -> accuracy, Wilson 95%, census
    python -m vldocir.apps.audit do=import sheet=/path/filled.csv dataset=vldocir
    python -m vldocir.apps.audit do=census 'census.structures=[cross_doc]'

Its own entry (like vldocir.apps.cleaning_ablations), not a vldocir.apps.report step: it reads a benchmark and a reviewer's sheet,
not the results store's runs.
"""

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from vldocir.apps import CONFIG_DIR


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="audit")
def main(cfg: DictConfig) -> None:
    from vldocir.data.benchmark import load_benchmark
    from vldocir.reporting import audit

    bench = load_benchmark(cfg.dataset.source, revision=cfg.dataset.revision, cache_dir=cfg.paths.cache_dir)
    structures = list(cfg.census.structures) if cfg.census.structures else None
    if cfg.do == "export":
        record = audit.export_review(bench, cfg.out_dir, OmegaConf.to_container(cfg.counts), cfg.seed)
        for stratum in record["strata"]:
            if stratum["short"]:
                print(f"{stratum['source']} {stratum['evidence_structure']}: only {stratum['available']} queries, "
                      f"all taken ({stratum['requested']} asked for)")
        print(f"sampled {len(record['query_ids'])} queries of {bench.name} (seed {cfg.seed})")
        print(f"review sheet: {cfg.out_dir}/{audit.SHEET_FILE} (fill verdict: correct|incorrect)")
        print(f"evidence pages: {cfg.out_dir}/{audit.REVIEW_DIR}/index.html")
        print("then: python -m vldocir.apps.audit do=import" + (f" dataset={cfg.dataset.name}" if cfg.dataset.name != "vl-docir-mini" else ""))
    elif cfg.do == "import":
        try:
            result = audit.import_review(bench, cfg.out_dir, cfg.sheet, cfg.confidence, structures, cfg.census.examples)
        except audit.AuditSheetError as error:  # the file and lines are in the message; no traceback
            print(f"audit sheet error: {error}", file=sys.stderr)
            sys.exit(2)
        print(audit.format_accuracy(result["accuracy"]))
        print()
        print(audit.format_census(result["census"]))
        print(f"wrote {cfg.out_dir}/report.json and report.md")
    elif cfg.do == "census":
        result = audit.census(bench, structures, cfg.census.examples)
        audit.write_report(cfg.out_dir, "census", f"Bounding-box census: {bench.name}", result, [audit.format_census(result)])
        print(audit.format_census(result))
        print(f"wrote {cfg.out_dir}/census.json and census.md")
    else:
        print(f"config error: do={cfg.do!r}; use export, import or census", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    from vldocir.launch import refuse_secret_overrides

    refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
    main()

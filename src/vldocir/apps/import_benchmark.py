"""Import another benchmark (BEIR, ViDoRe v1-v3, MMLongBench-Doc, MMDocIR, LongDocURL) into this
project's form, explicitly: what ``python run.py dataset=<name>`` does on first use.

    python -m vldocir.apps.import_benchmark dataset=vidore_v3_hr
    python -m vldocir.apps.import_benchmark dataset=beir_dbpedia_entity dataset.importer.source=/data/dbpedia-entity
    python -m vldocir.apps.import_benchmark dataset=vidore_v2_esg 'dataset.importer.languages=[french]' \
        dataset.name=vidore-v2-esg-fr
    python -m vldocir.apps.import_benchmark dataset=vidore_v3_hr overwrite=true   # import again

Prints what was kept and dropped (per table and reason), the queries per evidence structure with the
rules that labelled them, per language and per structure within each language, the source labels no
mapping table names, how documents were identified and the notes (rows left out, named);
benchmark.json records the same (``built_by``). A hub source not pinned to a commit is refused
(exit 2, one line) unless ``dataset.importer.allow_unpinned=true``.
"""

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("import_benchmark", config_name="import_benchmark")
def main(cfg: DictConfig) -> None:
    from vldocir.errors import ConfigError
    from vldocir.importers.base import import_benchmark, open_imported, summary

    if cfg.dataset.get("importer") is None:
        raise ConfigError(f"dataset {cfg.dataset.name} names no importer (dataset.importer): nothing to import")
    importer = instantiate(cfg.dataset.importer, _convert_="all")
    if cfg.overwrite:
        bench = import_benchmark(importer, cfg.dataset.source, name=cfg.dataset.name, replace=True)
    else:
        bench = open_imported(importer, cfg.dataset.source, name=cfg.dataset.name)
    print(summary(bench))
    print(f"benchmark {bench.name} in {bench.root} (fingerprint {bench.fingerprint})")


if __name__ == "__main__":
    main()

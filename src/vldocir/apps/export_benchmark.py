"""Export a benchmark in the ViDoRe v3 hub layout with a dataset card; optionally push it to the hub.

    python -m vldocir.apps.export_benchmark dataset=mini out=/tmp/hub
    python -m vldocir.apps.export_benchmark dataset=vidore_v3_hr out=/tmp/hr force=true
    HF_TOKEN=hf_... python -m vldocir.apps.export_benchmark dataset=mini out=/tmp/hub push=<org>/<name>

``push=<org>/<name>`` (the issue's ``--push``, in Hydra's form) uploads the folder with
``huggingface_hub`` to a dataset repository, created private when missing (``private=false``: public);
the token is read from the environment variable ``HF_TOKEN`` and never written. Re-import the folder
with ``python run.py dataset=hub dataset.importer.source=<out> dataset.name=<name>`` (conf/dataset/hub.yaml).
"""

from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("export_benchmark", config_name="export_benchmark")
def main(cfg: DictConfig) -> None:
    from vldocir.errors import ConfigError
    from vldocir.interop.hub_layout import export_hub, push_to_hub
    from vldocir.pipeline.datasets import open_benchmark

    if cfg.shard_mb <= 0 or cfg.row_group_rows <= 0:
        raise ConfigError(f"shard_mb ({cfg.shard_mb}) and row_group_rows ({cfg.row_group_rows}) must be positive")
    bench = open_benchmark(cfg.dataset, cfg.paths.cache_dir)
    export = export_hub(
        bench,
        cfg.out,
        force=cfg.force,
        default_language=cfg.language,
        shard_bytes=int(cfg.shard_mb * 2**20),
        row_group_rows=cfg.row_group_rows,
    )
    shards = ", ".join(f"{c} {export.rows[c]} rows in {n} shard(s)" for c, n in export.shards.items())
    print(f"exported {bench.name} (fingerprint {bench.fingerprint}) to {export.root}: {shards}; card README.md")
    if cfg.push:
        url = push_to_hub(export.root, str(cfg.push), private=cfg.private)
        print(f"pushed {export.root} to the hub dataset {cfg.push}: {url}")


if __name__ == "__main__":
    main()

"""Entry point of evidence-configuration sampling (paper §3.3): the page(s) each VLM-generated query
will be written from, over an existing rendered benchmark; writes configs.parquet + manifest.json.

    python -m vldocir.apps.sample_evidence                                   # the shipped mini, offline, seconds
    python -m vldocir.apps.sample_evidence benchmark=/data/vl-docir name=vl-docir sampling.configs_per_structure=2500

Its own entry, not a vldocir.apps.build step: vldocir.apps.build renders HTML with Chromium before anything else,
while this stage only reads a built benchmark's tables (and is rerun with other budgets or seeds).
"""

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("sample_evidence", config_name="sample_evidence")
def main(cfg: DictConfig) -> None:
    from vldocir.queries.evidence_configs import run_evidence_sampling

    configs, counts, out_dir = run_evidence_sampling(
        cfg.benchmark, instantiate(cfg.sampling), instantiate(cfg.encoder), cfg.out_dir
    )
    print(counts.to_string())
    print(f"wrote {len(configs)} evidence configurations to {out_dir}/configs.parquet")


if __name__ == "__main__":
    main()

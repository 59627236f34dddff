"""Entry point of evidence-configuration sampling (paper §3.3): the page(s) each VLM-generated query
will be written from, over an existing rendered benchmark; writes configs.parquet + manifest.json.

    python -m vldocir.apps.sample_evidence                                   # the shipped mini, offline, seconds
    python -m vldocir.apps.sample_evidence benchmark=/data/vl-docir name=vl-docir sampling.configs_per_structure=2500

Its own entry, not a vldocir.apps.build step: vldocir.apps.build renders HTML with Chromium before anything else,
while this stage only reads a built benchmark's tables (and is rerun with other budgets or seeds).
"""

import sys

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps import CONFIG_DIR


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="sample_evidence")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.evidence_configs import EvidenceSamplingError, run_evidence_sampling
    try:
        configs, counts, out_dir = run_evidence_sampling(cfg.benchmark, instantiate(cfg.sampling),
                                                         instantiate(cfg.encoder), cfg.out_dir)
    except EvidenceSamplingError as error:
        print(f"evidence sampling error: {error}", file=sys.stderr)
        sys.exit(2)
    print(counts.to_string())
    print(f"wrote {len(configs)} evidence configurations to {out_dir}/configs.parquet")


if __name__ == "__main__":
    from vldocir.launch import refuse_secret_overrides

    refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
    main()

"""Entry point of the query-cleaning ablations (paper Tables 6-10): every removal method against a
labelled keep/remove set; prints the confusion matrices and writes results/cleaning/<method>.json.

    python -m vldocir.apps.cleaning_ablations                                       # shipped synthetic set, hand-recorded LLM answers
    python -m vldocir.apps.cleaning_ablations cleaning.labelled=/data/cleaning-1438.csv cleaning.llm_recorded=null \
        cleaning.llm.model=Qwen/Qwen3-VL-32B-Instruct     # a real set and a served LLM

Its own entry (like vldocir.apps.build), not a run.py stage: it reads no benchmark, retriever or setting.
"""

import sys

import hydra
from omegaconf import DictConfig

from vldocir.apps import CONFIG_DIR


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="cleaning_ablations")
def main(cfg: DictConfig) -> None:
    from vldocir.construction.cleaning import LabelledSetError, format_summary, run_cleaning
    from vldocir.errors import ConfigError

    try:
        results = run_cleaning(cfg.cleaning)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        sys.exit(2)
    except LabelledSetError as error:  # the file and row are in the message; no traceback
        print(f"labelled set error: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"labelled set: {cfg.cleaning.labelled}")
    print("rows actual, columns predicted; P = removed. LLM methods on the whole set, classifiers on the held-out part.")
    print(format_summary(results))
    print(f"wrote {len(results)} files to {cfg.cleaning.out_dir}; `make tables` shows them beside Tables 6-10")


if __name__ == "__main__":
    from vldocir.launch import refuse_secret_overrides

    refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
    main()

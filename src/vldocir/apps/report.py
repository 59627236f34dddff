"""Entry point of the reports: the paper's tables and figures and the reproduction check, from the
results store (``paths.results_dir``, the same as run.py's).

    python -m vldocir.apps.report                                    # tables and figures (make tables)
    python -m vldocir.apps.report 'do=[figures]'                     # only the figures (make figures)
    python -m vldocir.apps.report 'do=[check]' quiet=true            # exit 1 if a cell differs (make check)
    python -m vldocir.apps.report paths.results_dir=/scratch/r benchmark=vl-docir-mini logger=wandb
"""

import sys

from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("report", config_name="report")
def main(cfg: DictConfig) -> None:
    from vldocir.reporting.report_tasks import run

    status = run(cfg)
    if status:  # Hydra drops a task's return value: a differing cell ends the process here
        sys.exit(status)


if __name__ == "__main__":
    main()

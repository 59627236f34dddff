"""Entry point: compose the config, run the evaluation pipeline, always close the tracker.

    python run.py                                   # DOM-BM25 on the embedded default benchmark
    python run.py retriever=colqwen25 setting=ctx n_ctx=256
    python run.py -m retriever=dom_bm25,ocr_bm25 hydra/launcher=submitit_local
    python run.py -m hydra/launcher=slurm_h100 --cfg hydra   # check a sweep's launcher, launch nothing
    python run.py -m stage=encode retriever=colqwen25 encode.num_tasks=8 'encode.task=range(8)' hydra/launcher=slurm_h100
"""

import sys

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from vldocir.config_checks import ConfigError
    from vldocir.pipeline import optimized_value, run_stage

    tracker = instantiate(cfg.logger)
    failed = True
    try:
        metrics = run_stage(cfg, tracker)
        failed = False
    except ConfigError as error:  # a bad override: one line, no traceback, before any work
        print(f"config error: {error}", file=sys.stderr)
        sys.exit(2)
    finally:
        tracker.finish(failed=failed)
    return optimized_value(cfg, metrics)


if __name__ == "__main__":
    from vldocir.launch import multirun_cfg_argv, refuse_secret_overrides

    refuse_secret_overrides(sys.argv)  # before Hydra writes the command line anywhere
    sys.argv = multirun_cfg_argv(sys.argv)
    main()

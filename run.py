"""Entry point: compose the config, run the evaluation pipeline, always close the tracker.

    python run.py                                   # DOM-BM25 on the embedded default benchmark
    python run.py retriever=colqwen25 setting=ctx n_ctx=256
    python run.py -m retriever=dom_bm25,ocr_bm25 hydra/launcher=submitit_local
    python run.py -m hydra/launcher=slurm_h100 --cfg hydra   # check a sweep's launcher, launch nothing
    python run.py -m stage=encode retriever=colqwen25 encode.num_tasks=8 'encode.task=range(8)' \
        hydra/launcher=slurm_h100

A bad override, a malformed benchmark, a full disk: one line on stderr (``run error: ...``), status 2
(vldocir.apps.app).
"""

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.apps.app import hydra_app
from vldocir.launch import multirun_cfg_argv


@hydra_app("run", config_name="config", argv=multirun_cfg_argv)
def main(cfg: DictConfig) -> float:
    from vldocir.pipeline import optimized_value, run_stage

    tracker = instantiate(cfg.logger)
    failed = True
    try:
        metrics = run_stage(cfg, tracker)
        failed = False
    finally:
        tracker.finish(failed=failed)
    return optimized_value(cfg, metrics)


if __name__ == "__main__":
    main()

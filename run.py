"""Entry point: compose the config, run the evaluation pipeline, always close the tracker.

    python run.py                                   # DOM-BM25 on the embedded default benchmark
    python run.py retriever=colqwen25 setting=ctx n_ctx=256
    python run.py -m retriever=dom_bm25,ocr_bm25 hydra/launcher=submitit_local
    python run.py -m hydra/launcher=slurm_h100 --cfg hydra   # check a sweep's launcher, launch nothing
"""

import sys

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from vldocir.pipeline import evaluate

    tracker = instantiate(cfg.logger)
    failed = True
    try:
        metrics = evaluate(cfg, tracker)
        failed = False
    finally:
        tracker.finish(failed=failed)
    aggregate, metric = cfg.optimized_metric.split("/")
    return metrics["aggregates"][aggregate][metric]


if __name__ == "__main__":
    from vldocir.launch import multirun_cfg_argv

    sys.argv = multirun_cfg_argv(sys.argv)
    main()

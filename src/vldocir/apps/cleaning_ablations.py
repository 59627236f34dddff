"""Entry point of the query-cleaning ablations (paper Tables 6-10): every removal method against a
labelled keep/remove set; prints the confusion matrices and writes results/cleaning/<method>.json.

    python -m vldocir.apps.cleaning_ablations      # shipped synthetic set, hand-recorded LLM answers
    python -m vldocir.apps.cleaning_ablations cleaning.labelled=/data/cleaning-1438.csv cleaning.llm_recorded=null \
        cleaning.llm.model=Qwen/Qwen3-VL-32B-Instruct     # a real set and a served LLM

Its own entry (like vldocir.apps.build), not a run.py stage: it reads no benchmark, retriever or setting.
"""

from omegaconf import DictConfig

from vldocir.apps.app import hydra_app


@hydra_app("cleaning_ablations", config_name="cleaning_ablations")
def main(cfg: DictConfig) -> None:
    from vldocir.queries.cleaning import format_summary, run_cleaning

    results = run_cleaning(cfg.cleaning)
    print(f"labelled set: {cfg.cleaning.labelled}")
    print(
        "rows actual, columns predicted; P = removed. LLM methods on the whole set, classifiers on the held-out part."
    )
    print(format_summary(results))
    print(f"wrote {len(results)} files to {cfg.cleaning.out_dir}; `make tables` shows them beside Tables 6-10")


if __name__ == "__main__":
    main()

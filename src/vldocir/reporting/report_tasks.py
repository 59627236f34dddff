"""``python -m vldocir.apps.report``: the paper's tables and figures and the reproduction check, in one run.

:func:`run` takes ``conf/report.yaml`` composed (by ``vldocir.apps.report``, or by :func:`compose_report`
for notebooks, tests and the end of a sweep): the results store is ``paths.results_dir``, the same
as ``run.py``'s, so ``python run.py paths.results_dir=X`` is reported by
``python -m vldocir.apps.report paths.results_dir=X`` (or with ``VLDOCIR_RESULTS_DIR=X`` for both).
Table 12 reads the audit imported into ``<paths.results_dir>/audit/<benchmark>`` (``audit_dir``), and
Table 1 and Figs. 5-7 the benchmark itself (``benchmark_dir``, :func:`locate_benchmark`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from vldocir.config_checks import CONF_DIR
from vldocir.errors import ConfigError
from vldocir.reporting.benchmark_view import locate_benchmark
from vldocir.reporting.check import print_check
from vldocir.reporting.figures import render_figures
from vldocir.reporting.formats import write_tables
from vldocir.reporting.other_runs import (
    benchmarks_markdown,
    external_results,
    other_benchmarks,
    other_runs_table,
    print_other_runs,
    unshown,
    write_other_runs,
)
from vldocir.reporting.other_runs import to_markdown as other_runs_markdown
from vldocir.reporting.outputs import ReportTable
from vldocir.reporting.paper import load_spec
from vldocir.reporting.store_view import ResultsView, choose_benchmark
from vldocir.reporting.tables import AUDIT_REPORT, build_tables
from vldocir.reporting.wandb_report import log_report
from vldocir.tracking.wandb import WandbTracker

log = logging.getLogger(__name__)

STEPS = ("tables", "figures", "check", "compare")


def run(cfg: DictConfig) -> int:
    """Render what ``cfg.do`` names (tables, figures, check) for the runs of one benchmark in
    ``cfg.paths.results_dir`` (``compare``: :func:`vldocir.reporting.compare.run_compare` first);
    with ``logger=wandb``, log the rendered tables and figures. With
    ``tables`` and ``cfg.other_runs``, the runs no paper row uses are listed too (README.md, console),
    then the runs on every other benchmark of the store, one section each (also other_runs.md|tex),
    with the mteb result files of ``cfg.mteb_results`` as external rows beside the runs of their benchmark.

    Returns the exit status: 1 when ``check`` finds a cell that differs by more than its
    tolerance, 0 otherwise (missing runs alone do not fail).
    """
    do = [cfg.do] if isinstance(cfg.do, str) else list(cfg.do)
    only = None if cfg.only is None else [cfg.only] if isinstance(cfg.only, str) else list(cfg.only)
    if set(do) - set(STEPS):
        raise ConfigError(f"do={do}: each step is one of {', '.join(STEPS)}")
    if "compare" in do:  # paired tests between named runs (vldocir.reporting.compare): no paper manifest needed
        from vldocir.reporting.compare import run_compare

        run_compare(cfg)
        do = [step for step in do if step != "compare"]
        if not do:
            return 0
    results, out, paper_dir = Path(cfg.paths.results_dir), Path(cfg.out_dir), Path(cfg.paper_dir)
    spec = load_spec(Path(cfg.manifest), paper_dir)
    if only is not None and set(only) - set(spec.tables) - set(spec.figures):
        raise ConfigError(
            f"only: {sorted(set(only) - set(spec.tables) - set(spec.figures))} are neither tables nor figures "
            f"of {cfg.manifest}"
        )
    benchmark, note = choose_benchmark(results, spec, cfg.benchmark)
    view = ResultsView(results, benchmark, ks=spec.ks, depth=spec.depth, audit_dir=cfg.audit_dir)
    paths = OmegaConf.to_container(cfg.paths, resolve=True)
    view.bench = locate_benchmark(
        benchmark, view.benchmark_dir(), requested=cfg.benchmark_dir, paths=paths, dataset_dir=CONF_DIR / "dataset"
    )
    print(f"Comparing runs of {benchmark} in {results}/runs with the published numbers in {paper_dir}")
    if note:
        print(f"Note: {note}")
    print(f"Benchmark tables (Table 1, Figs. 5-7): {view.bench.found}")
    print(
        f"Imported audit (Table 12): {view.audit_dir / AUDIT_REPORT}"
        + ("" if (view.audit_dir / AUDIT_REPORT).is_file() else " (none yet)")
    )
    print(f"Store entries used (ks including {list(spec.ks)}, depth {spec.depth} preferred, then the newest):")
    for line in view.choices():
        print(f"  {line}")

    tables: dict[str, ReportTable] = {}
    if "tables" in do or "check" in do:
        names = [name for name in spec.tables if only is None or name in only]
        tables = build_tables(spec, view, names, cache_dir=Path(cfg.paths.cache_dir))  # significance results
    files: list[Path] = []
    if "tables" in do:
        external, where = external_results(cfg.get("mteb_results")) if cfg.other_runs else ([], "")
        others = other_runs_table(spec, view, external) if cfg.other_runs else None
        elsewhere = other_benchmarks(spec, view, external, where) if cfg.other_runs else []
        sections = None if others is None else other_runs_markdown(others, view) + benchmarks_markdown(elsewhere, view)
        files += write_tables(tables, out / "tables", note, view.choices(), sections)
        if others is not None:
            files += write_other_runs(others, elsewhere, view, out / "tables")
        for name, table in tables.items():
            print(f"  {name:<38} {table.n_rows_reproduced:>3} of {len(table.rows):>3} rows reproduced")
        print(f"Tables: {out / 'tables'}/*.md, *.tex")
        if others is not None:
            print_other_runs(others, out / "tables" / "README.md", elsewhere)
            missing = unshown(external, view, elsewhere)
            if missing:
                print(f"mteb results not shown (no listed runs of their benchmark): {', '.join(missing)}")
    figures: dict[str, Path] = {}
    if "figures" in do:
        made = render_figures(
            spec, view, out / "figures", [name for name in spec.figures if only is None or name in only]
        )
        figures = {name: result.png for name, result in made.items()}
        files += [path for result in made.values() for path in (result.pdf, result.png)]
        for name, result in made.items():
            print(f"  {name:<38} {result.origin}")
        print(f"Figures: {out / 'figures'}/*.pdf, *.png")
    status = 0
    if "check" in do:
        print(f"\nReproduction check of {len(tables)} tables:")
        status = print_check(spec, view, tables, cfg.tolerance, cfg.quiet)

    logger = instantiate(cfg.logger)
    if isinstance(logger, WandbTracker) and files:
        where = log_report(
            tables if "tables" in do else {}, figures, logger, benchmark=benchmark, note=note, files=files
        )
        print(f"Logged to W&B: {where}")
    return status


def compose_report(overrides: Sequence[str] = (), paths: Mapping[str, Any] | None = None) -> DictConfig:
    """``conf/report.yaml`` composed with ``overrides`` as ``python -m vldocir.apps.report OVERRIDES`` composes
    it, resolved and without its ``hydra`` node: the config of notebooks, tests and
    :class:`TablesOnSweepEnd`.

    One difference: where ``paths.root_dir`` falls back to the current directory (no
    ``VLDOCIR_ROOT``), it is the repository here, so that a notebook started in ``notebooks/``
    reads the same store as ``python -m vldocir.apps.report`` in the repository. ``paths`` (plain values, e.g. a
    sweep's resolved paths) replaces those keys of the paths group before anything is resolved.
    """
    if GlobalHydra.instance().is_initialized():  # inside run.py (a sweep callback), whose search path is conf/
        cfg = compose(config_name="report", overrides=list(overrides), return_hydra_config=True)
    else:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="report", overrides=list(overrides), return_hydra_config=True)
    if paths:
        cfg.paths = OmegaConf.merge(cfg.paths, dict(paths))
    cfg.hydra.runtime.cwd = str(CONF_DIR.parent)
    # ${hydra:runtime.cwd} reads the global HydraConfig: set it to this config's while resolving,
    # then put back whatever was there (a running job's, or nothing).
    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    hydra_config.set_config(cfg)
    try:
        with open_dict(cfg):
            del cfg["hydra"]
        OmegaConf.resolve(cfg)
    finally:
        hydra_config.cfg = previous
    return cfg


class TablesOnSweepEnd(Callback):
    """Hydra callback: when a multirun ends, render the paper tables and figures from the sweep's
    results store and log them to W&B (``wandb=False``: render only).

        python run.py -m experiment=fig10_nctx +hydra.callbacks.tables._target_=vldocir.reporting.report_tasks.TablesOnSweepEnd
    """  # noqa: E501 -- a shell command line in the docstring; it cannot be wrapped

    def __init__(self, wandb: bool = True, benchmark: str | None = None):
        self.wandb, self.benchmark = wandb, benchmark

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        overrides = [
            f"benchmark={self.benchmark or config.dataset.name}",
            f"logger={'wandb' if self.wandb else 'none'}",
        ]
        log.info("sweep finished: rendering the paper tables (%s)", " ".join(overrides))
        run(compose_report(overrides, paths=OmegaConf.to_container(config.paths, resolve=True)))

"""Opening the benchmark a job's ``dataset`` names: building, importing or deriving it on first use.

A dataset config names a benchmark directory (``dataset.source``); a generated one is built there
from ``dataset.build`` (vldocir.construction.synthetic), an imported one from ``dataset.importer``
(vldocir.importers), and a derived one (``dataset.derive``) from its parent's benchmark
(vldocir.data.reduced), each on first use and reused afterwards.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from vldocir.config_checks import ConfigError
from vldocir.data.benchmark import Benchmark, load_benchmark
from vldocir.data.reduced import open_dataset

log = logging.getLogger(__name__)


def open_benchmark(dataset: DictConfig, cache_dir: str | Path) -> Benchmark:
    """The benchmark ``dataset`` names. A derived one (``dataset.derive``: conf/dataset/*_reduced.yaml)
    is made from its parent's benchmark on first use and cached under ``cache_dir`` (vldocir.data.reduced)."""
    return open_dataset(dataset, Path(cache_dir), _open_source)


def _open_source(dataset: DictConfig) -> Benchmark:
    """Load ``dataset.source``; build it first from ``dataset.build``, or import it with
    ``dataset.importer`` (vldocir.importers), if it does not exist yet."""
    source = str(dataset.source)
    local = not source.startswith("hf://")
    if local and dataset.get("importer") is not None:
        from vldocir.importers.base import open_imported

        return open_imported(instantiate(dataset.importer, _convert_="all"), source, name=dataset.name)
    if local and dataset.get("build") is not None:
        from vldocir.construction.synthetic import generate

        spec = instantiate(dataset.build)
        if not (Path(source) / "benchmark.json").is_file():
            log.info("building benchmark %s into %s (first use)", dataset.name, source)
            generate(spec, source)
        else:
            _check_generated_from(Path(source), spec)
    return load_benchmark(source, revision=dataset.get("revision"))


def _check_generated_from(source: Path, spec) -> None:
    """A generated benchmark directory must come from the spec the config asks for now: a
    ``dataset.build.*`` override does not silently reuse what an earlier spec generated there."""
    from vldocir.construction.synthetic import spec_differences

    try:
        recorded = json.loads((source / "benchmark.json").read_text()).get("built_by", {}).get("spec")
    except (OSError, ValueError, AttributeError):
        return  # load_benchmark reports an unreadable benchmark.json
    if recorded is None:
        log.warning("benchmark %s does not record the spec it was generated from; it is used as it is", source)
        return
    differing = spec_differences(recorded, spec)
    if differing:
        raise ConfigError(
            f"benchmark {source} was generated from another dataset.build spec (differs in: {', '.join(differing)}); "
            "delete that directory to generate it again, or give this spec its own dataset.name"
        )

"""The analysis notebooks (jupytext percent format) run top to bottom on the mini benchmark's run.

They are executed as plain scripts (``python notebooks/<name>.py``) and in one Jupyter kernel (nbclient),
each in a fresh namespace, with the results store pointed at the test's copy through
``VLDOCIR_RESULTS_DIR`` (read by the paths group of ``conf/report.yaml``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from report_stores import REPO_ROOT, TEXT_BENCH

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.py"))


def test_notebooks_are_jupytext_percent_scripts():
    import jupytext

    assert len(NOTEBOOKS) >= 2
    for path in NOTEBOOKS:
        notebook = jupytext.read(path)
        assert notebook.metadata["jupytext"]["text_representation"]["format_name"] == "percent", path.name
        assert notebook.cells[0].cell_type == "markdown"
        imports = [line for line in path.read_text().splitlines() if line.startswith(("import ", "from "))]
        for line in imports:  # the store, its aggregation code and plotting; never a benchmark loader or a model
            assert not any(
                name in line for name in ("vldocir.data.benchmark", "vldocir.retrieval", "vldocir.pipeline", "torch")
            ), line


@pytest.mark.slow
def test_notebooks_run_as_scripts(mini_results, tmp_path):
    """`python notebooks/<name>.py`, from another directory, finds the store through VLDOCIR_RESULTS_DIR and
    prints its tables (display outside Jupyter prints)."""
    env = {**os.environ, "VLDOCIR_RESULTS_DIR": str(mini_results), "MPLBACKEND": "Agg"}
    for path in NOTEBOOKS:
        done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{path.name}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        assert f"run(s) of {TEXT_BENCH}" in done.stdout, path.name
        assert "dom_bm25/base" in done.stdout, path.name  # the run's label, in the tables it displays


@pytest.mark.slow
def test_notebooks_execute_on_the_mini_run(mini_results, tmp_path, monkeypatch):
    import jupytext
    import nbclient

    monkeypatch.setenv("VLDOCIR_RESULTS_DIR", str(mini_results))

    client = None
    notebooks = {path: jupytext.read(path) for path in NOTEBOOKS}
    first = next(iter(notebooks.values()))
    client = nbclient.NotebookClient(
        first, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel():  # one kernel for all notebooks, reset between them
        for path, notebook in notebooks.items():
            client.nb = notebook
            client.reset_execution_trackers()
            client.execute_cell(nbformat_cell("%reset -f"), 0)
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
            outputs = "".join(
                output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
            )
            assert f"run(s) of {TEXT_BENCH}" in outputs, path.name
            images = sum(
                "image/png" in output.get("data", {})
                for cell in notebook.cells
                if cell.cell_type == "code"
                for output in cell.outputs
            )
            assert images >= 2, f"{path.name}: its plots did not render"
            (tmp_path / f"{Path(path).stem}.ipynb").write_text(jupytext.writes(notebook, fmt="ipynb"))


def nbformat_cell(source: str):
    from nbformat.v4 import new_code_cell

    return new_code_cell(source)

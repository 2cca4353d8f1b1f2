"""The notebooks in notebooks/: each runs top to bottom on the smoke sweep without a cell error,
its jupytext .py and .ipynb hold the same cells, and the .ipynb is committed without outputs."""

import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from smoke_sweep import TARGET

from conftest import REPO
from harness.results import CURVES_TABLE, RUNS_TABLE

NOTEBOOKS = REPO / "notebooks"
SCRIPTS = sorted(NOTEBOOKS.glob("*.py"))
EXPECTED = {
    "convergence",
    "lr_sensitivity",
    "batch_size",
    "momentum",
    "summary",
    "esgd",
    "tuning",
    "zoo",
}
# Figures each notebook shows: the sweep notebooks on the smoke sweep, esgd on a tiny ESGD study.
IMAGES = {
    "convergence": 5,
    "lr_sensitivity": 1,
    "batch_size": 2,
    "momentum": 0,
    "summary": 4,
    "esgd": 2,
    "tuning": 2,
    "zoo": 4,
}
# Figures the smoke sweep cannot have, and the reason each notebook prints for skipping them.
SKIPPED = {
    "convergence": ["no optimizer in the sweep tunes"],
    "momentum": ["the sweep does not vary both the momentum and the learning rate"],
}


def test_every_analysis_notebook_is_there():
    assert {p.stem for p in SCRIPTS} == EXPECTED
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == EXPECTED


@pytest.fixture(scope="module")
def committed_like_sweep(smoke_sweep, tmp_path_factory) -> Path:
    """The smoke sweep as a study is committed: the consolidated tables only."""
    folder = tmp_path_factory.mktemp("committed") / "smoke"
    folder.mkdir()
    for table in (RUNS_TABLE, CURVES_TABLE):
        shutil.copy(smoke_sweep / table, folder / table)
    return folder


@pytest.fixture(scope="module")
def tiny_esgd_study(tmp_path_factory) -> Path:
    """A tiny ESGD study (every method, two generations), as `python -m harness.esgd` writes."""
    from conftest import tiny_cfg
    from harness.esgd.app import execute

    folder = tmp_path_factory.mktemp("esgd")
    execute(tiny_cfg("esgd.repeats=2", "esgd.generations=2"), folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_notebook_runs_without_error_on_the_smoke_sweep(
    script, committed_like_sweep, tiny_esgd_study, monkeypatch, tmp_path
):
    notebook = nbformat.read(script.with_suffix(".ipynb"), as_version=4)
    # The kernel inherits the environment: the notebooks read the sweep folder from it.
    monkeypatch.setenv("HARNESS_SWEEP", str(committed_like_sweep))
    monkeypatch.setenv("HARNESS_ESGD", str(tiny_esgd_study))
    monkeypatch.setenv("HARNESS_TARGET", str(TARGET))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError, with the failing cell, on any error
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # Every figure the smoke sweep supports is shown; the others say why they are skipped.
    skipped = [o["text"] for o in outputs if "Figure skipped" in o.get("text", "")]
    expected = SKIPPED.get(script.stem, [])
    assert len(skipped) == len(expected) and all(
        e in text for e, text in zip(expected, skipped, strict=True)
    )
    assert len(images) == IMAGES[script.stem]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_paired_ipynb_is_in_sync_and_has_no_outputs(script):
    paired = script.with_suffix(".ipynb")
    from_script, from_ipynb = jupytext.read(script), jupytext.read(paired)

    def cells(nb):
        return [(c.cell_type, c.source.strip()) for c in nb.cells]

    assert cells(from_script) == cells(from_ipynb), (
        f"{paired.name} differs from {script.name}: run `jupytext --sync notebooks/*.py`"
    )
    raw = nbformat.read(paired, as_version=4)
    assert raw.metadata.kernelspec.name == "python3"  # nbmake fails on any other kernel name
    for cell in raw.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{paired.name} has outputs: clear them before committing"
            )

"""bench notebooks: each notebook timed under nbval in its own process, beside a two-cell baseline."""

import pytest

from mgpu_helpers.bench import notebooks


def test_a_name_that_matches_no_notebook_is_refused_saying_what_to_give(capsys):
    with pytest.raises(SystemExit) as exc:
        notebooks.main(["no_such_notebook"])
    assert exc.value.code == 2
    assert "no notebook in notebooks matches no_such_notebook" in capsys.readouterr().err


def test_cell_durations_are_read_from_pytests_report():
    report = (
        "1.50s call     notebooks/08_x.ipynb::Cell 2\n"
        "0.30s setup    notebooks/08_x.ipynb::Cell 2\n"
        "0.25s call     notebooks/08_x.ipynb::Cell 7\n"
    )
    assert notebooks.DURATION.findall(report) == [("1.50", "call", "2"), ("0.30", "setup", "2"), ("0.25", "call", "7")]


def test_the_baseline_notebook_runs_and_its_cells_are_timed():
    wall, slowest, ok = notebooks.run_notebook(notebooks.floor_notebook())
    assert ok, "the two-cell baseline (mh.setup() and one 2-rank launch) failed under nbval"
    assert wall > 0 and slowest and all(seconds >= 0.2 for seconds, _ in slowest)
    assert {index for _, index in slowest} <= {0, 1}


def test_a_notebook_that_runs_past_the_limit_is_a_failed_row(monkeypatch):
    def hang(cmd, **kw):
        raise notebooks.subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(notebooks.subprocess, "run", hang)
    wall, slowest, ok = notebooks.run_notebook("notebooks/00_setup.ipynb")
    assert (slowest, ok) == ([], False) and wall >= 0

"""A short real `evolver run` with the embedded model in every role (minutes on 2 cores: slow)."""
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evolver.cli import cli

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("java") is None, reason="TextWorldExpress needs Java 17")]


def test_a_short_real_run_completes_with_a_report(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOLVER_HOME", os.environ.get("EVOLVER_HOME", str(Path.home() / ".cache" / "evolver")))
    monkeypatch.chdir(tmp_path)
    args = ["--store", "store", "--set=benchmark_options={suite = \"twx-easy\", games = [\"twc\", \"arithmetic\"], max_steps = 4}",
            "run", "--iterations", "1", "--set=loop.dev_per_category=1", "--set=loop.test_per_category=1",
            "--set=roles.proposer.max_tokens=96"]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    report = next((tmp_path / "store" / "reports").glob("*.md")).read_text()
    assert "| seed (baseline) |" in report and "## Candidates" in report
    from evolver.store import Store
    with Store(tmp_path / "store" / "evolver.duckdb") as store:
        run = store.latest_run()
        assert run["status"] == "finished"
        props = store.proposals(run["run_id"])
        assert len(props) == 2 and all(p["status"] in ("admitted", "discarded", "rejected") for p in props)
        _, rows = store.query("SELECT count(*) FROM steps JOIN episodes USING (episode_id) WHERE run_id = ?",
                              [run["run_id"]])
        assert rows[0][0] > 0

"""A pipeline of a user's own (tests/cli/project, outside the lakelog package) through every
`lakelog` command with ``--pipeline`` and through the `dagster` CLI; `lakelog init` and the
scaffolded project's own test; offset resets refused and rebuilt; bad ``--pipeline`` values."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from processes import subprocess_env

from lakelog.assets.instance_file import INSTANCE_YAML

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).with_name("project")
LAKELOG = [sys.executable, "-m", "lakelog.cli"]
WINDOW = "window.signups_per_minute"


def signup(i: int, plan: str, second: int) -> dict:
    return {"event_id": f"s{i}", "user_id": f"u{i % 5}", "plan": plan,
            "time": f"2026-01-05T10:{second // 60:02d}:{second % 60:02d}Z"}


FIRST = [signup(i, "free" if i % 3 else "pro", 10 * i) for i in range(12)]
SECOND = [signup(i, "free", 10 * i) for i in range(12, 20)]


def run(args, *, cwd, env=None, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env or subprocess_env(), capture_output=True,
                          text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def rows(home: Path, path: str, drop=("revision", "batch")) -> list[dict]:
    data = DeltaTable(str(home / path)).to_pyarrow_table()
    data = data.drop_columns([c for c in drop if c in data.column_names])
    return sorted(data.to_pylist(), key=lambda r: json.dumps(r, default=str, sort_keys=True))


def one_line_error(proc: subprocess.CompletedProcess, message: str) -> None:
    assert proc.returncode == 1, proc.stdout
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("lakelog")]) == 1


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> dict:
    """The project folder (a copy: nothing is written into the checkout), a lake, a Dagster
    instance, and `lakelog(*args)` running the CLI in the project folder."""
    root = tmp_path_factory.mktemp("user")
    folder = Path(shutil.copytree(PROJECT, root / "project"))
    home, instance = root / "lake", root / "dagster_home"
    env = subprocess_env(DAGSTER_HOME=str(instance))

    def lakelog(*args, check=True, pipeline="signups", **extra):
        chosen = ["--pipeline", pipeline] if pipeline else []
        return run([*LAKELOG, *args, *chosen, "--home", str(home)], cwd=folder,
                   env={**env, **extra}, check=check)

    return {"folder": folder, "home": home, "instance": instance, "env": env,
            "lakelog": lakelog}


@pytest.fixture(scope="module")
def ran(project, tmp_path_factory) -> dict:
    """`FIRST` produced (with a malformed line), `SECOND` landed, then one `lakelog run`:
    its JSON report, and what `produce` said."""
    lakelog, home = project["lakelog"], project["home"]
    first = tmp_path_factory.mktemp("records") / "first.ndjson"
    first.write_text("".join(json.dumps(s) + "\n" for s in FIRST) + "{not json\n")
    produced = json.loads(lakelog("produce", "signups", str(first), "--json").stdout)
    landing = home / "landing" / "signups"
    landing.mkdir(parents=True)
    (landing / "b.ndjson").write_text("".join(json.dumps(s) + "\n" for s in SECOND))
    return {"produced": produced, "report": json.loads(lakelog("run", "--json").stdout)}


def test_every_command_works_on_a_pipeline_of_ones_own(project, ran, monkeypatch):
    lakelog, home, report = project["lakelog"], project["home"], ran["report"]
    assert (ran["produced"]["appended"], ran["produced"]["dead_letters"]) == (12, 1)
    assert report["success"] and report["pipeline"] == "signups"
    done = {m["asset"]: m["metadata"] for m in report["materialized"]}
    assert done["log/signups"]["records_appended"] == 8
    assert done["streams/signups_per_minute"]["records"] == 20
    assert done["views/signups_per_hour"]["mode"] == "full"
    assert {r["plan"]: r["signups"] for r in rows(home, "views/signups_per_hour")} == {
        "free": 16, "pro": 4}
    # The run is on the instance at $DAGSTER_HOME, every live asset with its materialization;
    # lakelog made it (a new folder), with its dagster.yaml, which names the storage by
    # $DAGSTER_HOME as `dagster dev` sets it.
    assert (project["instance"] / "dagster.yaml").read_text() == INSTANCE_YAML.read_text()
    monkeypatch.setenv("DAGSTER_HOME", str(project["instance"]))
    instance = dg.DagsterInstance.from_config(str(project["instance"]))
    assert instance.get_run_by_id(report["run_id"]).job_name == "pipeline"
    for key in ("log/signups", "streams/signups_per_minute", "streams/signup_copies",
                "views/signups_per_hour"):
        assert instance.get_latest_materialization_event(dg.AssetKey(key.split("/"))), key

    topics = json.loads(lakelog("topics", "--json", pipeline=None,
                                LAKELOG_PIPELINE="signups:pipeline").stdout)
    assert [(t["topic"], t["records"]) for t in topics] == [("signups", 20)]
    tail = json.loads(lakelog("tail", "signups", "-n", "3", "--json").stdout)
    assert len(tail) == 3 and {r["event_id"] for r in tail} <= {s["event_id"] for s in SECOND}
    lag = json.loads(lakelog("lag", "--json").stdout)
    assert {r["consumer"] for r in lag} == {"copies", WINDOW}
    assert all(r["lag"] == 0 for r in lag)
    compacted = json.loads(lakelog("compact", "signups", "--json").stdout)
    assert compacted["topic"] == "signups" and compacted["version"] is None  # nothing closed yet
    one_line_error(lakelog("squash", "tables/signups", check=False),
                   "'tables/signups' is not a merge-on-read table of pipeline signups; those "
                   "are: none")
    one_line_error(lakelog("demo", "--events", "10", check=False),
                   "pipeline signups has no topic page_views, searches, clicks, cart_events, "
                   "orders; run a pipeline of your own with `lakelog run`")


def test_offset_resets_keep_the_derived_tables_right(project, ran):
    lakelog, home = project["lakelog"], project["home"]
    windows = rows(home, "streams/signups_per_minute")
    assert sum(w["signups"] for w in windows) == 20

    refused = lakelog("offsets", "reset", WINDOW, "--to", "earliest", check=False)
    one_line_error(refused, f"resetting consumer {WINDOW} to earliest would replay 20 records")
    assert "streams/signups_per_minute is keyed by window_start, plan" in refused.stderr
    assert "--rebuild" in refused.stderr

    lakelog("offsets", "reset", "copies", "--to", "earliest")  # plain appends take a replay
    behind = json.loads(lakelog("lag", "copies", "--json").stdout)
    assert sum(r["lag"] for r in behind) == 20

    rebuilt = json.loads(lakelog("offsets", "reset", WINDOW, "--to", "earliest", "--rebuild",
                                 "--json").stdout)
    assert set(rebuilt["emptied"]) == {"streams/signups_per_minute",
                                       "streams/signups_per_minute_late"}
    assert rebuilt["replay"]["records"] == 20 and not rebuilt["replay"]["held_back"]
    assert rows(home, "streams/signups_per_minute") == windows  # not one record counted twice
    assert all(r["lag"] == 0 for r in json.loads(lakelog("lag", WINDOW, "--json").stdout))


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("no_such_module", "no module named 'no_such_module'"),
        ("signups:nope", "module signups has no attribute 'nope'"),
        ("signups:SIGNUPS", "signups:SIGNUPS is a Topic, not a lakelog Pipeline"),
        ("lakelog.log.topics", "module lakelog.log.topics declares 0 lakelog Pipelines (none)"),
        ("broken", "pipeline module broken: pipeline broken: consumer copies reads undeclared "
                   "topic(s) sign_ups"),
        ("not a module", "--pipeline 'not a module': expected module[:attribute]"),
    ],
)
def test_a_bad_pipeline_is_a_one_line_error(project, pipeline, message):
    one_line_error(project["lakelog"]("topics", check=False, pipeline=pipeline), message)


def test_the_dagster_cli_loads_and_materializes_the_pipeline(project, tmp_path):
    folder, home = project["folder"], tmp_path / "lake"
    env = {**project["env"], "LAKELOG_HOME": str(home), "DAGSTER_HOME": str(tmp_path)}
    dagster = [sys.executable, "-m", "dagster"]
    valid = run([*dagster, "definitions", "validate", "-m", "signups_location"], cwd=folder,
                env=env)
    assert "Validation successful for code location signups_location" in valid.stderr + valid.stdout
    landing = home / "landing" / "signups"
    landing.mkdir(parents=True)
    (landing / "a.ndjson").write_text("".join(json.dumps(s) + "\n" for s in FIRST))

    run([*dagster, "asset", "materialize", "-m", "signups_location", "--select",
         "log/signups,streams/signups_per_minute,streams/signups_per_minute_late"],
        cwd=folder, env=env)

    windows = rows(home, "streams/signups_per_minute")
    assert sum(w["signups"] for w in windows) == 12
    assert {(w["plan"], w["window_start"].minute) for w in windows} == {
        ("pro", 0), ("free", 0), ("free", 1), ("pro", 1)}


def test_init_scaffolds_a_project_that_runs_at_once(tmp_path):
    (tmp_path / "dagster_home").mkdir()
    env = subprocess_env(DAGSTER_HOME=str(tmp_path / "dagster_home"))
    made = json.loads(run([*LAKELOG, "init", "Corner Shop", "--json"], cwd=tmp_path,
                          env=env).stdout)
    folder = tmp_path / "Corner Shop"
    assert made["package"] == "corner_shop"
    assert made["pipeline"] == "corner_shop.pipeline:pipeline"
    assert {"pyproject.toml", "workspace.yaml", "corner_shop/pipeline.py",
            "corner_shop/models/actions_per_hour.sql", "tests/test_pipeline.py",
            ".lakelog/dagster/dagster.yaml"} <= set(made["files"])
    # The instance the printed next steps name: `dagster dev` started first runs under it too.
    assert (folder / ".lakelog" / "dagster" / "dagster.yaml").read_text() == (
        INSTANCE_YAML.read_text())
    again = run([*LAKELOG, "init", "Corner Shop"], cwd=tmp_path, env=env, check=False)
    one_line_error(again, "exists and is not an empty folder")

    tested = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=folder,
                 env=env, check=False)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "2 passed" in tested.stdout

    # In the project folder, lakelog finds its pipeline through pyproject.toml, dagster its
    # code location through workspace.yaml.
    produced = run([*LAKELOG, "produce", "events", "examples/events.ndjson", "--json"],
                   cwd=folder, env=env)
    assert json.loads(produced.stdout)["appended"] == 4
    assert [t["topic"] for t in json.loads(run([*LAKELOG, "topics", "--json"], cwd=folder,
                                                env=env).stdout)] == ["events"]
    valid = run([sys.executable, "-m", "dagster", "definitions", "validate", "-w",
                 "workspace.yaml"], cwd=folder, env=env)
    assert "Validation successful for code location corner_shop" in valid.stderr + valid.stdout

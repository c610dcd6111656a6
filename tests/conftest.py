"""Checks over the whole test session, and how the tests share out under pytest-xdist (``make test``: ``-n 3
--dist loadfile``).

* Every test module runs on one worker (``--dist loadfile``), so its module-scoped captures are made once
  (``--dist loadgroup`` no longer keeps a group together: xdist 3.8 writes the group into ``item._nodeid``,
  which pytest 9 does not read, so each test was handed out alone); the longest modules are handed out first,
  then those with slow tests, so that no long module starts last (xdist's reordering by number of tests is off).
* The captures several modules read (``tiny_nmt_run``, ``nmt_loop_fused``, ``rnnlm_planted``) are made once per
  session, by the first worker that needs them, under a file lock in the session's shared temporary folder.
* torchrun jobs rendezvous on a port the OS chooses (``PET_RDZV_*``, as ``torchrun --standalone``), so two
  jobs on two workers never both ask for the default 29500.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from pathlib import Path

import pytest

from rnnprof.traces import kineto

from fixtures import TINY_NMT, decode_each_trace_once, importable_benchmarks
from processes import become_subreaper, left_running, run_retried, stderr_ends

# torchrun's options read PET_<OPTION> from the environment: a c10d rendezvous on a free local port.
os.environ.setdefault("PET_RDZV_BACKEND", "c10d")
os.environ.setdefault("PET_RDZV_ENDPOINT", "localhost:0")

decode_each_trace_once(kineto)

# A suite started in the background of a shell without job control (`make test &` in a script, CI steps that
# background it) starts with SIGINT and SIGQUIT ignored, and every process the tests start would inherit that: the
# tests that press Ctrl-C on a job (SIGINT to rnnprof, to a worker pool) would find it ignored, as a background
# job is meant to, and wait out their timeouts. The tests play the terminal, so SIGINT and SIGQUIT get their
# defaults back here, in every pytest process, before any test starts a process.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


# The longest modules, longest first (CPU seconds of each, 40 to 115, measured alone): they are handed out before
# every other, so that none of them starts late and runs alone at the end.
LONGEST = ("tests/test_cluster_run.py", "tests/test_diagnosis_jobs.py", "tests/test_torch.py",
           "tests/test_torch_script.py", "tests/test_explain.py", "tests/test_diff.py", "tests/test_trace_signals.py",
           "tests/test_trace_cli.py", "tests/test_interrupt.py", "tests/test_hang_tf.py", "tests/test_memory_faults.py",
           "tests/test_hang_jobs.py", "tests/test_torch_parallel.py", "tests/test_watch.py")


def pytest_configure(config):
    """xdist hands the modules out in the order of the collection (below), not by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The LONGEST modules first, then those with the most slow tests (a stable sort: the order within a module
    is kept)."""
    slow: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        slow[module] = slow.get(module, 0) + (item.get_closest_marker("slow") is not None)

    def order(item):
        module = item.nodeid.split("::")[0]
        return (LONGEST.index(module), 0) if module in LONGEST else (len(LONGEST), -slow[module])

    items.sort(key=order)


# Where the suite's time goes. On 2 cores its three workers keep both busy, so a test's wall time says more about
# its neighbours than about itself; its CPU time does not: its own (the worker's) and that of every process it
# started and reaped (the jobs, the frameworks they import). Each test's two figures ride on its teardown report
# to the session's terminal summary, which sums them per module.
CPU_KEY, CPU_MODULES_SHOWN = "cpu_s", 12
_CPU_START = pytest.StashKey[tuple[float, float]]()


def _cpu_now() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_START] = _cpu_now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        (own0, children0), (own1, children1) = item.stash[_CPU_START], _cpu_now()
        outcome.get_result().user_properties.append((CPU_KEY, (own1 - own0, children1 - children0)))


def _cpu_figures(report) -> tuple[float, float] | None:
    """A test's (own, started) CPU seconds, on its teardown report; None on any other report."""
    figures = dict(getattr(report, "user_properties", ())).get(CPU_KEY)
    return figures if getattr(report, "when", None) == "teardown" and figures else None


def cpu_by_module(reports) -> dict[str, tuple[float, float, int]]:
    """Per test module, from the teardown reports: its tests' own CPU seconds, their processes', and its tests."""
    modules: dict[str, tuple[float, float, int]] = {}
    for report in reports:
        figures = _cpu_figures(report)
        if figures is None:
            continue
        module = report.nodeid.split("::")[0]
        own, children, tests = modules.get(module, (0.0, 0.0, 0))
        modules[module] = (own + figures[0], children + figures[1], tests + 1)
    return modules


def _write_cpu_by_test(reports, path: str) -> None:
    """Every test's CPU seconds (own, started) as a tab-separated file, the most costly first (TEST_CPU_REPORT)."""
    rows = sorted(((r.nodeid, *figures) for r in reports if (figures := _cpu_figures(r)) is not None),
                  key=lambda row: -(row[1] + row[2]))
    Path(path).write_text("".join(f"{own + children:.1f}\t{own:.1f}\t{children:.1f}\t{nodeid}\n"
                                  for nodeid, own, children in rows))


def pytest_terminal_summary(terminalreporter):
    reports = [r for reports in terminalreporter.stats.values() for r in reports]
    modules = cpu_by_module(reports)
    if not modules:
        return
    if os.environ.get("TEST_CPU_REPORT"):
        _write_cpu_by_test(reports, os.environ["TEST_CPU_REPORT"])
    own, children = (sum(m[k] for m in modules.values()) for k in (0, 1))
    terminalreporter.write_sep("-", f"CPU time: {own + children:,.0f} s, {own:,.0f} s in the tests' own processes, "
                                    f"{children:,.0f} s in the processes they started")
    ranked = sorted(modules.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    for module, (m_own, m_children, tests) in ranked[:CPU_MODULES_SHOWN]:
        terminalreporter.write_line(f"{m_own + m_children:7.1f} s  ({m_own:6.1f} own, {m_children:6.1f} started)  "
                                    f"{tests:4d} tests  {module}")
    if len(ranked) > CPU_MODULES_SHOWN:
        rest = sum(m[0] + m[1] for _, m in ranked[CPU_MODULES_SHOWN:])
        terminalreporter.write_line(f"{rest:7.1f} s  in the other {len(ranked) - CPU_MODULES_SHOWN} modules")


WATCHED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"))


def kernel_signal_state() -> dict[str, set[str]]:
    """The watched signals this process blocks and ignores as the kernel sees them (``/proc/self/status``: the
    main thread's SigBlk, the process's SigIgn), which ``signal.getsignal`` does not show when a library changed
    them; empty where there is no /proc."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return {}
    masks = dict(line.split(":\t", 1) for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn")))
    return {key: {signal.Signals(s).name for s in WATCHED_SIGNALS if int(masks[key], 16) >> (s - 1) & 1}
            for key in ("SigBlk", "SigIgn") if key in masks}


@pytest.fixture(autouse=True)
def signal_handlers_left_as_found():
    """A test leaves this process's signal handlers as it found them. A handler left behind outlives the test:
    an ignored signal is inherited by every process the later tests start, and a Python handler by every child
    they fork (torch's elastic agent once left one that kept a forked pool worker from stopping). So does a
    blocked signal, and an ignored one a library set without Python's ``signal`` module: both are read from the
    kernel, before and after."""
    before = {signum: signal.getsignal(signum) for signum in WATCHED_SIGNALS}
    kernel_before = kernel_signal_state()
    yield
    changed = {signal.Signals(signum).name: (handler, signal.getsignal(signum))
               for signum, handler in before.items() if signal.getsignal(signum) != handler}
    kernel_after = kernel_signal_state()
    if kernel_after != kernel_before:
        changed["kernel"] = (kernel_before, kernel_after)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED_SIGNALS)
    if changed:  # put back for the next test (an ignored signal gets its handler back)
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        pytest.fail(f"the test changed this process's signal handlers: {changed}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def no_process_left_running():
    """The suite leaves no process behind: at the end, every process it started (children, their
    children, and orphans re-parented to the test process) has exited, or the last test fails naming it.
    Under xdist each worker checks its own."""
    become_subreaper()
    yield
    left = left_running()
    for pid in left:  # named below; not left to run on
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        listing = "; ".join(f"pid {pid}: {command}" for pid, command in sorted(left.items()))
        pytest.fail(f"{len(left)} process(es) started by the tests still running at the end: {listing}",
                    pytrace=False)


def shared_once(tmp_path_factory, name: str, make) -> Path:
    """``make(folder)`` run once per test session, whichever xdist worker asks first; the others wait on a file
    lock and read the same ``folder``. Without xdist, once per process."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above every worker's own
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            make(folder)
            done.touch()
    return folder


# The arguments tests/data/tf-run-nmt-loop-fused was captured with (``rnnprof trace ... --encoder loop|fused``).
NMT_LOOP_FUSED = ["--model", "nmt", "--direction", "bi", "--layers", "2", "--units", "16", "--vocab-size", "200",
                  "--src-max-len", "12", "--tgt-max-len", "12", "--batch-size", "4", "--devices", "2",
                  "--warmup", "1", "--batches", "1", "--trace-steps", "1"]


def _trace_together(root: Path, runs: dict[str, list[str]]) -> None:
    """``rnnprof trace`` of each of ``runs`` (name -> arguments) into ``root/name``, side by side, each in a
    process of its own."""
    from processes import run_together

    for done in run_together([[sys.executable, "-m", "rnnprof", "trace", *argv, "--out", str(root / name)]
                              for name, argv in runs.items()]):
        assert done.returncode == 0, done.stderr


def _read_only(root: Path) -> None:
    """Every file and folder under ``root`` made read-only: the tests that share a capture can only read it."""
    for path in sorted(root.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)


# The small RNNLM on 2 logical devices with tower 1's softmax and projection pinned to device 0, and the same
# without the plant: 4 traced steps (the critical path's), 2 timed batches (the placement audit's).
RNNLM_SMALL_2 = ["--model", "rnnlm", "--preset", "small", "--devices", "2", "--warmup", "1", "--batches", "2",
                 "--trace-steps", "4"]


def _capture_rnnlm_planted(root: Path) -> None:
    _trace_together(root, {"plain": RNNLM_SMALL_2, "planted": [*RNNLM_SMALL_2, "--plant", "softmax-on-device0"]})
    _read_only(root)


@pytest.fixture(scope="session")
def rnnlm_planted(tmp_path_factory):
    """``RNNLM_SMALL_2`` captured once for the session with the softmax-on-device0 plant (``root/planted``) and
    without it (``root/plain``); read-only."""
    return shared_once(tmp_path_factory, "rnnlm-planted", _capture_rnnlm_planted)


DDP_STRAGGLER_JOB = Path(__file__).resolve().parent / "ddp_straggler_job.py"
DDP_SLEEP_S = 0.060  # rank 1's planted sleep per step in ``ddp_straggler_run``


def _ddp_job(out: Path, sleep_s: float) -> None:
    """``tests/ddp_straggler_job.py`` under torchrun, tried again if its gloo rendezvous fails (``run_retried``)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "0",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", str(DDP_STRAGGLER_JOB), str(out),
               str(sleep_s)]
    done = run_retried(command, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=180)
    assert done.returncode == 0, f"torchrun failed twice; the last run's stderr:\n{stderr_ends(done)}"


@pytest.fixture(scope="session")
def ddp_straggler_run(tmp_path_factory):
    """The 2-rank gloo job of ``tests/ddp_straggler_job.py`` with rank 1 sleeping ``DDP_SLEEP_S`` a step, run
    once for the session; tests only read it."""
    return shared_once(tmp_path_factory, "ddp-straggler", lambda folder: _ddp_job(folder, DDP_SLEEP_S))


@pytest.fixture(scope="session")
def ddp_balanced_run(tmp_path_factory):
    """The same job without the sleep (the control), run once for the session."""
    return shared_once(tmp_path_factory, "ddp-balanced", lambda folder: _ddp_job(folder, 0.0))


def _diagnosis_control(folder: Path) -> None:
    importable_benchmarks()
    import diagnosis

    diagnosis.run_ddp("slow-loader", True, folder)


@pytest.fixture(scope="session")
def diagnosis_control(tmp_path_factory) -> Path:
    """The diagnosis benchmark's balanced DDP job (``benchmarks/diagnosis_jobs/slow_loader.py --control``: its
    model, batches and steps, no rank sleeping, every batch at once) under rnnprof trace, run once for the session:
    ``run`` is its run directory, ``clock`` its ranks' own step times; tests only read it. It is the control of the
    straggler and of the slow loader (tests/test_diagnosis_jobs.py) and of the planted memory faults
    (tests/test_memory_faults.py)."""
    return shared_once(tmp_path_factory, "diagnosis-control", _diagnosis_control)


def _capture_tiny(root: Path) -> None:
    from rnnprof.cli import main

    assert main(["trace", *TINY_NMT, "--out", str(root / "nmt2")]) == 0


@pytest.fixture(scope="session")
def tiny_nmt_run(tmp_path_factory):
    """``rnnprof trace`` of TINY_NMT captured once for the session, into a folder named ``nmt2``; tests only
    read it."""
    return shared_once(tmp_path_factory, "tiny", _capture_tiny) / "nmt2"


@pytest.fixture
def announced_tensorboard(monkeypatch) -> list[list[str]]:
    """``rnnprof view``'s TensorBoard replaced by a process that prints TensorBoard's address line (port 6006) and
    exits; the command lines view built for it, in order."""
    from rnnprof.commands import view

    launched = []
    tensorboard_command = view.tensorboard_command

    def announce_and_exit(logdir, host, port):
        launched.append(tensorboard_command(logdir, host, port))
        return [sys.executable, "-c", "print('TensorBoard 2 at http://127.0.0.1:6006/ (Press CTRL+C to quit)')"]

    monkeypatch.setattr(view, "tensorboard_command", announce_and_exit)
    return launched

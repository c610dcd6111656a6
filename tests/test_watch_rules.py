"""rnnprof watch without a job: the detector on series made here with their faults planted at known steps (the
figures each test expects are the planted ones), the series files, and the watch over a job played by a thread
(what a crashing analysis, an unwritable folder, a rank that stops and an ask from another terminal do to it)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rnnprof.analyzers.watch import (INPUT_STALL, MEMORY_GROWTH, REGRESSION, SPIKE, STRAGGLER, Detector)
from rnnprof.events.series import COLUMNS, EXPORTED, PROFILED, series_from_rows
from rnnprof.recording.hang_probe import RankProbe
from rnnprof.recording.watcher import WatchOptions, Watcher
from rnnprof.rundir.series import SeriesTail, SeriesWriter, read_series, series_header, series_path
from rnnprof.rundir.windows import ask_for_window, read_lines, read_request, request_path

STEP_S = 0.012
FAULT = 300
STEPS = 600
MIB = 1 << 20


def job(fault=None, seed=0, ranks=2, steps=STEPS, at=FAULT, noise=0.0015, memory_noise=True, waits=True):
    """Rows of a synchronous job's ranks (``COLUMNS`` order): each rank's own time (data wait, forward, backward,
    optimizer) with log-normal jitter; the step ends with the slowest rank, the others wait for it in the
    all-reduce. ``fault`` planted from step ``at``: "straggler" (rank 1 +30 ms), "regression" (every rank +10 ms),
    "stall" (rank 0's data wait +20 ms), "memory" (every rank +1 MiB a step), "spike" (one step +300 ms), "machine"
    (every rank +10 ms spent waiting for a core)."""
    rng = np.random.default_rng(seed)
    rows = {r: [] for r in range(ranks)}
    memory = {r: 500e6 for r in range(ranks)}
    end = 1.0e9
    for step in range(steps):
        own = {r: STEP_S * rng.lognormal(0, noise / STEP_S) for r in range(ranks)}
        extra = {r: 0.0 for r in range(ranks)}  # in the forward: a slower model, a sleep
        data = {r: 0.0003 * rng.lognormal(0, 0.2) for r in range(ranks)}
        if fault == "straggler" and step >= at:
            extra[1] += 0.030
        if fault in ("regression", "machine") and step >= at:
            extra = {r: t + 0.010 for r, t in extra.items()}
        queued = 0.010 if fault == "machine" and step >= at else 0.0001  # the ranks wait for a core
        if fault == "stall" and step >= at:
            data[0] += 0.020
        took = max(own[r] + extra[r] + data[r] for r in own) + (0.300 if fault == "spike" and step == at else 0.0)
        end += took
        for r in range(ranks):
            wait = took - own[r] - extra[r] - data[r] + 0.0005
            if fault == "memory" and step >= at:
                memory[r] += MIB
            if memory_noise and rng.random() < 0.2:  # the allocator takes or gives a page now and then
                memory[r] += rng.choice([-4096.0, 4096.0])
            rows[r].append([step, end, took, data[r], own[r] * 0.3 + extra[r], own[r] * 0.6 + wait, own[r] * 0.1,
                            wait if waits else None, took * 0.9, queued, memory[r], None, 0])
    return rows


def detect(rows, chunk=25):
    """Every anomaly the detector raises as the rows come, ``chunk`` steps at a time."""
    detector, found = Detector(), []
    steps = len(next(iter(rows.values())))
    for start in range(0, steps, chunk):
        for rank, rank_rows in rows.items():
            detector.feed(series_from_rows(rank, rank_rows[start:start + chunk]))
        found += detector.advance()
    return found


@pytest.mark.parametrize("seed", range(4))
def test_a_balanced_job_raises_nothing(seed):
    assert detect(job(seed=seed)) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_straggler_is_named_within_a_few_steps_with_what_it_costs(seed):
    found = detect(job("straggler", seed=seed))
    stragglers = [a for a in found if a.kind == STRAGGLER]
    assert len(stragglers) == 1 and stragglers[0].ranks == (1,)
    assert FAULT <= stragglers[0].step <= FAULT + 20
    assert stragglers[0].cost == pytest.approx(0.030, rel=0.1)  # the planted 30 ms a step
    assert {a.kind for a in found} <= {STRAGGLER, REGRESSION}  # the step time rose with it: no spike, no stall


def test_without_collective_waits_a_straggler_is_named_by_its_own_phases():
    stragglers = [a for a in detect(job("straggler", waits=False)) if a.kind == STRAGGLER]
    assert len(stragglers) == 1 and stragglers[0].ranks == (1,) and stragglers[0].cost == pytest.approx(0.030, rel=0.1)
    assert stragglers[0].source == "the ranks' own phases"


def test_a_regression_is_raised_once_on_every_rank_with_its_cost():
    found = detect(job("regression"))
    assert [(a.kind, a.ranks) for a in found] == [(REGRESSION, (0, 1))]
    assert FAULT <= found[0].step <= FAULT + 20 and found[0].cost == pytest.approx(0.010, rel=0.2)


def test_a_regression_the_ranks_spent_waiting_for_a_core_says_the_machine_is_busy():
    from rnnprof.reports.watch import anomaly_text

    (machine,) = detect(job("machine"))
    assert machine.kind == REGRESSION and machine.waited == pytest.approx(0.010, rel=0.05)
    assert "waiting for a core: the machine is busy" in anomaly_text(machine)
    (own,) = detect(job("regression"))
    assert own.waited == pytest.approx(0.0, abs=1e-6) and "waiting for a core" not in anomaly_text(own)


def test_a_spike_a_rank_spent_waiting_for_a_core_is_the_machines_not_an_anomaly():
    rows = job("spike")
    for row in rows[1][FAULT:FAULT + 1]:
        row[9] = 0.290  # rank 1 waited that long for a core; rank 0 waited for rank 1
    detector, found = Detector(), []
    for rank, rank_rows in rows.items():
        detector.feed(series_from_rows(rank, rank_rows))
    assert detector.advance() == [] and [(a.kind, a.step) for a in detector.machine_spikes] == [(SPIKE, FAULT)]


def test_an_input_stall_is_named_on_its_rank():
    stalls = [a for a in detect(job("stall")) if a.kind == INPUT_STALL]
    assert len(stalls) == 1 and stalls[0].ranks == (0,) and stalls[0].cost == pytest.approx(0.020, rel=0.1)
    assert FAULT <= stalls[0].step <= FAULT + 20


def test_memory_growth_is_named_with_its_rate_and_onset():
    found = detect(job("memory"))
    assert [a.kind for a in found] == [MEMORY_GROWTH]
    assert found[0].ranks == (0, 1) and found[0].cost == pytest.approx(MIB, rel=0.02)
    assert FAULT - 5 <= found[0].onset <= FAULT + 5 and found[0].step <= FAULT + 50


def test_a_jump_kept_before_the_growth_leaves_its_rate_and_onset_right():
    """Memory flat to the byte, a window's 30 MiB kept 40 steps before the leak: the growth is judged a few steps
    in, and its rate is the leak's, not pulled down by a level fitted across the jump."""
    rows = job("memory", memory_noise=False)
    for r in rows:
        for row in rows[r][FAULT - 40:]:
            row[10] += 30 * MIB
    found = [a for a in detect(rows) if a.kind == MEMORY_GROWTH]
    assert len(found) == 1 and found[0].ranks == (0, 1) and found[0].step <= FAULT + 20
    assert found[0].cost == pytest.approx(MIB, rel=0.02) and FAULT - 2 <= found[0].onset <= FAULT + 2


def test_a_window_during_the_growth_leaves_its_rate_right():
    """A window of 4 profiled steps and its export 6 steps into the leak, the export keeping 6 MiB more (the
    profiler's and the trace's own memory, as a watched rank's resident memory shows it): the rate and the onset
    are the leak's (judged with the window's memory in, the onset was put after the window)."""
    rows = job("memory", memory_noise=False)
    for r in rows:
        for row in rows[r][FAULT + 6:FAULT + 10]:
            row[-1] = PROFILED
        rows[r][FAULT + 10][-1] = EXPORTED
        for row in rows[r][FAULT + 10:]:
            row[10] += 6 * MIB
    found = [a for a in detect(rows, chunk=5) if a.kind == MEMORY_GROWTH]
    assert len(found) == 1 and found[0].ranks == (0, 1) and found[0].step > FAULT + 10
    assert found[0].cost == pytest.approx(MIB, rel=0.02) and FAULT - 2 <= found[0].onset <= FAULT + 2


def test_one_jump_of_memory_or_a_slow_creep_is_no_growth():
    rows = job(memory_noise=False)
    for r in rows:
        for row in rows[r][FAULT:]:
            row[10] += 50 * MIB  # one allocation kept from then on
        for k, row in enumerate(rows[r]):
            row[10] += 16 * k  # the allocator's creep: 16 bytes a step
    assert detect(rows) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_shift_within_the_jitter_is_not_raised(seed):
    rows = job(seed=seed)  # the step's jitter: about 1.5 ms; 3 times it, 4.5 ms
    for rank_rows in rows.values():
        for row in rank_rows[FAULT:]:
            row[2] += 0.0025
    assert detect(rows) == []


def test_a_burst_that_stands_out_3_steps_in_a_row_is_not_raised():
    """Slow steps at FAULT + 0, 1, 2, 3 and 5: the median of the last 8 steps stands out at FAULT + 5, 6 and 7 only;
    a shift must stand out 4 steps in a row."""
    rows = job()
    for rank_rows in rows.values():
        for k in (0, 1, 2, 3, 5):
            rank_rows[FAULT + k][2] += 0.012
    assert detect(rows) == []


def test_a_spike_is_one_step_and_the_start_of_a_regression_is_none():
    spikes = detect(job("spike"))
    assert [(a.kind, a.step) for a in spikes] == [(SPIKE, FAULT)]
    assert spikes[0].value == pytest.approx(0.300 + STEP_S, rel=0.1)
    assert SPIKE not in {a.kind for a in detect(job("regression"))}


def test_profiled_steps_are_neither_baseline_nor_judged():
    rows = job()
    for r in rows:
        for row in rows[r][FAULT:FAULT + 6]:
            row[2] += 0.5  # the profiler's cost in a window: half a second a step
            row[-1] = PROFILED
    assert detect(rows) == []


def test_the_live_view_gives_each_rank_its_step_skew_and_the_throughput():
    detector = Detector()
    for rank, rank_rows in job("straggler").items():
        detector.feed(series_from_rows(rank, rank_rows))
    detector.advance()
    view = detector.view()
    assert view.step == STEPS - 1 and [r.rank for r in view.ranks] == [0, 1]
    assert view.ranks[1].skew_s - view.ranks[0].skew_s == pytest.approx(0.030, rel=0.15)  # rank 1's own time
    assert view.steps_per_s == pytest.approx(1 / (STEP_S + 0.030 + 0.0003), rel=0.1)


# -- the series files ------------------------------------------------------------------------------------------

def _row(step):
    return [step, time.time(), 0.01, 0.001, 0.002, 0.005, 0.001, 0.0005, 0.009, 0.0, 1e8, None, 0]


def test_a_series_is_read_as_written_and_a_line_cut_short_is_left_out(tmp_path):
    writer = SeriesWriter(series_path(tmp_path, 3), series_header(3))
    for step in range(5):
        assert writer.append(_row(step))
    writer.close()
    with open(series_path(tmp_path, 3), "ab") as handle:
        handle.write(b"[5, 1.0, 0.01")  # a rank killed in the middle of a write
    series = read_series(tmp_path)[3]
    assert list(series["step"]) == [0, 1, 2, 3, 4] and np.isnan(series["memory_peak"]).all()
    assert series["comm_wait_s"][0] == 0.0005 and len(COLUMNS) == len(series.columns)


def test_a_rank_started_again_goes_on_numbering_its_steps(tmp_path):
    for _ in range(2):
        writer = SeriesWriter(series_path(tmp_path, 0), series_header(0))
        for step in range(3):
            writer.append(_row(step))
        writer.close()
    series = read_series(tmp_path)[0]
    assert list(series["step"]) == [0, 1, 2, 3, 4, 5] and series.restarts == 1


def test_a_tail_reads_only_what_is_new(tmp_path):
    writer = SeriesWriter(series_path(tmp_path, 0), series_header(0))
    tail = SeriesTail(tmp_path)
    writer.append(_row(0))
    assert list(tail.read()[0]["step"]) == [0]
    assert tail.read() == {}
    writer.append(_row(1))
    writer.append(_row(2))
    assert list(tail.read()[0]["step"]) == [1, 2]


def test_a_full_disk_stops_the_series_and_never_raises(tmp_path):
    full = tmp_path / "full.jsonl"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    writer = SeriesWriter(full, series_header(0))
    assert not writer.append(_row(0)) and "No space left on device" in writer.error


# -- the watch over a job played by a thread ---------------------------------------------------------------------

class Events:
    def __init__(self):
        self.said = []

    def steps(self, view, first, last):
        self.said.append(("steps", first, last))

    def anomaly(self, anomaly, window, why_not):
        self.said.append(("anomaly", anomaly.kind, window, why_not))

    def window(self, request, reason):
        self.said.append(("window", request.name, reason))

    def verdict(self, window, verdict):
        self.said.append(("verdict", window, verdict.get("text")))

    def note(self, text):
        self.said.append(("note", text))

    def machine(self, spike):
        self.said.append(("machine", spike.step))


class Crashing:
    """An analysis that fails as it ends, as a window's analysis process that crashed does."""

    def __init__(self, window, baseline, anomalies):
        self.window = window

    def poll(self):
        raise RuntimeError("the analysis crashed")

    def stop(self):
        pass

    def hurry(self):
        pass


def play(run_dir: Path, rows: dict, stop_rank_at: int | None = None, pace_s: float = 0.002, until=None):
    """Each rank's rows written to its series as a job would, each step counted by its hang probe; from
    ``stop_rank_at`` rank 1 runs on but its series stops (a full disk). Each rank opens the window asked of it (a
    folder with its manifest closed) once it reaches the window's steps. ``until``: the job runs on, its probes
    open, until it is true (at most 60 s), as a real job runs on long after its last row here: a watch slowed by
    a loaded machine makes its passes seconds apart."""
    writers = {r: SeriesWriter(series_path(run_dir, r), series_header(r)) for r in rows}
    probes = {r: RankProbe(run_dir, r) for r in rows}
    for probe in probes.values():
        probe.install()
    for step in range(len(rows[0])):
        for rank, writer in writers.items():
            if rank != 1 or stop_rank_at is None or step < stop_rank_at:
                writer.append(rows[rank][step])
            probes[rank].tick()
        request = read_request(request_path(run_dir))
        folder = run_dir / "windows" / request.name if request is not None else None
        if folder is not None and step >= request.first_step + request.steps and not folder.exists():
            folder.mkdir(parents=True)
            (folder / "manifest.json").write_text('{"format": "rnnprof-run", "status": "complete"}')
        time.sleep(pace_s)
    time.sleep(0.5)  # the watch reads the last steps while the ranks' probes are still open
    deadline = time.monotonic() + 60
    while until is not None and not until() and time.monotonic() < deadline:
        time.sleep(0.1)
    for probe in probes.values():
        probe.close()


def test_the_watch_outlives_a_crashing_analysis_an_unwritable_folder_and_a_rank_that_stops(tmp_path):
    from rnnprof.rundir.tensorboard import ScalarWriter

    events = Events()
    watcher = Watcher(tmp_path, WatchOptions(window_steps=3, capture_gap=50, baseline_step=40), events,
                      analyse=Crashing, scalars=ScalarWriter("/proc/rnnprof-cannot-write-here"))
    stopped = "rank 1: its series stopped at step 499 while it ran on"
    with watcher:
        play(tmp_path, job("straggler", steps=STEPS), stop_rank_at=500,
             until=lambda: any(s[0] == "note" and s[1].startswith(stopped) for s in list(events.said)))
    said = events.said
    notes = [s[1] for s in said if s[0] == "note"]
    assert any("TensorBoard scalars stopped" in n for n in notes)
    assert any(n.startswith(stopped) for n in notes)
    assert not any("the watch stopped" in n for n in notes)  # the analyses' failure stayed theirs
    windows = [s for s in said if s[0] == "window"]
    assert [w[2] for w in windows][:2] == ["baseline", REGRESSION] or [w[2] for w in windows][:2] == [
        "baseline", STRAGGLER]
    # each window the job ran through has its analysis' failure for verdict; one opened past the job's last step (a
    # watch slowed by a loaded machine raises its anomaly later) was never captured, and says so
    first = {w[1]: int(w[1].split("step")[1]) for w in windows}
    verdicts = {s[1]: s[2] for s in said if s[0] == "verdict"}
    assert verdicts and "failed" in verdicts["000-step40"]
    for name, text in verdicts.items():
        assert ("failed" in text) if first[name] + 3 <= STEPS else text.startswith("not captured"), (name, text)
    assert any(s[0] == "steps" and s[2] >= STEPS - 1 for s in said)  # rank 0 was watched to its end


def test_a_window_its_ranks_opened_as_the_job_ended_says_it_was_not_captured(tmp_path):
    """A window asked once the job has run its last row: its ranks open it, then end before its steps, and their
    records name no trace. Its verdict says it was not captured; no analysis is run on it."""
    from rnnprof.recording import ranks

    events = Events()
    watcher = Watcher(tmp_path, WatchOptions(window_steps=3, baseline_step=None), events, analyse=Crashing)
    rows = job(steps=120)

    def asked_then_ended():
        request = read_request(request_path(tmp_path))
        if request is None:
            watcher.ask()
            return False
        for rank in rows:  # as each rank closes a window it opened without tracing a step
            ranks.write_record(tmp_path / "windows" / request.name, {"rank": rank, "trace": None, "steps": [],
                                                                     "status": "complete", "exit_code": 0})
        return True

    with watcher:
        play(tmp_path, rows, until=asked_then_ended)
    verdicts = [s[2] for s in events.said if s[0] == "verdict"]
    assert verdicts == ["not captured: the job ended before the window's steps were traced"], events.said


def test_a_window_asked_from_another_terminal_is_answered_and_asked_of_every_rank(tmp_path):
    events = Events()
    answers = []
    watcher = Watcher(tmp_path, WatchOptions(window_steps=3, baseline_step=None), events)
    with watcher:
        rows = job(steps=STEPS)
        writer = threading.Thread(target=play, args=(tmp_path, rows), kwargs={"pace_s": 0.002})
        writer.start()
        time.sleep(0.3)
        answers.append(ask_for_window(tmp_path, 5.0))
        writer.join()
    assert answers[0] and answers[0].startswith("window 000-step")
    request = read_request(request_path(tmp_path))
    assert request is not None and answers[0].startswith(f"window {request.name}")
    assert any(s[0] == "window" and s[2] == "requested" for s in events.said)
    assert not any(s[0] == "anomaly" for s in events.said)
    assert [line for line in read_lines(tmp_path) if "anomaly" in line] == []


def test_a_signal_asks_for_a_window_too(tmp_path):
    import signal

    events = Events()
    watcher = Watcher(tmp_path, WatchOptions(window_steps=3, baseline_step=None), events)
    previous = signal.signal(signal.SIGUSR1, lambda *_: watcher.ask())
    try:
        with watcher:
            writer = threading.Thread(target=play, args=(tmp_path, job(steps=300)), kwargs={"pace_s": 0.002})
            writer.start()
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGUSR1)
            writer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert [s[2] for s in events.said if s[0] == "window"] == ["requested"]


# -- the command's refusals: one line, exit 2, nothing started --------------------------------------------------

def test_a_tensorflow_script_is_refused_with_why(tmp_path, capfd):
    from rnnprof.cli import main

    script = tmp_path / "train.py"
    script.write_text("import tensorflow as tf\n")
    assert main(["watch", "--out", str(tmp_path / "run"), "--", sys.executable, str(script)]) == 2
    assert "rnnprof watch runs PyTorch scripts" in capfd.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--model", "nmt", "--", "python", "train.py"], "--model does not apply when watching a script"),
    (["--", "python", "train.py"], "--out DIR is required when watching a script"),
    (["--capture", "NOWHERE"], "no watched run there"),
    (["--capture", "NOWHERE", "--window-steps", "3"], "--capture RUN takes nothing else"),
])
def test_flags_that_do_not_fit_are_refused_in_one_line(tmp_path, capfd, argv, message):
    from rnnprof.cli import main

    argv = [str(tmp_path / "nowhere") if word == "NOWHERE" else word for word in argv]
    assert main(["watch", *argv]) == 2
    err = capfd.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("gap, most, why", [(1000, 5, "--capture-gap 1000"), (50, 1, "--max-captures 1")])
def test_windows_are_rate_limited(tmp_path, gap, most, why):
    """Two regressions of the same job 200 steps apart (the second larger: a level the job has had is no new one):
    the second opens no window within the gap, or past the most windows a job may have; each is logged all the same,
    with why it has none."""
    rows = job(steps=STEPS + 100)
    for rank_rows in rows.values():
        for step, row in enumerate(rank_rows):
            if FAULT <= step < FAULT + 100:
                row[2] += 0.010
            elif FAULT + 200 <= step < FAULT + 300:
                row[2] += 0.030
    events = Events()
    with Watcher(tmp_path, WatchOptions(window_steps=3, capture_gap=gap, max_captures=most, baseline_step=None),
                 events):
        play(tmp_path, rows)
    raised = [s for s in events.said if s[0] == "anomaly" and s[1] == REGRESSION]
    assert len(raised) == 2
    assert raised[0][2] is not None and raised[0][3] == ""
    assert raised[1][2] is None and why in raised[1][3]

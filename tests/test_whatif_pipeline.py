"""whatif's pipeline changes (--micro-batches, --move-layer) on pipelines run exactly by their schedule
(``pipeline_traces``): the run replayed with the change against the run written with the change made (each
stage's work set by hand, per layer and per micro-batch), and against the schedule's own arithmetic."""

from __future__ import annotations

import functools
import gzip
import json
import statistics

import pytest

from pipeline_traces import write_job
from rnnprof.analyzers.replay import COMM, MICRO_BATCHES, MOVE_LAYER, Change, ChangeError, whatif
from rnnprof.cli import main
from rnnprof.traces import load_events

LAYER_F_US, LAYER_B_US = 100.0, 250.0  # one layer's forward and backward on a micro-batch of a quarter batch
WORK = ("aten::mm", "autograd::engine::evaluate_function: MmBackward0")
CALL_US = 2.0  # a send's call and run, a receive's call
VIEW_US = 8.0  # what calling and recording an operator costs (``_views``)
UNCHANGED = [Change(COMM, "", 1.0)]


def _job(tmp_path, name: str, kind: str, micro: int, layers: tuple[int, ...], ranges: bool | str = True,
         edit=None, views: int = 0, loss_us: float = 0.0, accumulate_us: float = 0.0):
    """A pipeline of ``len(layers)`` stages, each stage's operator per micro-batch its layers' times, a
    micro-batch's share of the batch (1/``micro``) of a quarter batch's, beside the calls of its transfers
    (``ranges``: as ``write_job``'s; ``edit(rank, events)``: a change to a rank's events before they are read;
    ``views``: after each operator, that many view operators, ``_views``; ``loss_us``: the last stage's loss after
    each forward, outside its range, whatever the micro-batch, ``_loss``; ``accumulate_us``: the end of each
    backward, inside its range, autograd's accumulation of the parameters' gradients, whatever the micro-batch,
    ``_accumulate``)."""
    folder = tmp_path / name
    folder.mkdir()
    share, calls = 4 / micro, 2 * CALL_US
    fixed = calls + (VIEW_US + views * 2 * VIEW_US if views else 0.0)
    last = len(layers) - 1
    paths = write_job(folder, kind, len(layers), micro,
                      [LAYER_F_US * n * share + fixed + (loss_us if s == last else 0.0) for s, n in enumerate(layers)],
                      [LAYER_B_US * n * share + fixed + accumulate_us for n in layers], ranges=ranges)
    if views:
        edit = functools.partial(_views, views)
    if loss_us:
        edit = functools.partial(_loss, loss_us, last)
    if accumulate_us:
        edit = functools.partial(_accumulate, accumulate_us)
    for rank, path in enumerate(paths):  # an operator begins after the send before it and ends before the
        document = json.loads(gzip.decompress(path.read_bytes()))  # receive after it is posted, as on a thread
        for e in document["traceEvents"]:
            if e["name"] in WORK:
                e["ts"], e["dur"] = e["ts"] + CALL_US, e["dur"] - 2 * CALL_US
        if edit is not None:
            edit(rank, document["traceEvents"])
        path.write_bytes(gzip.compress(json.dumps(document).encode()))
    return load_events([str(p) for p in paths])


def _views(views: int, rank: int, events: list) -> None:
    """After each micro-batch's operator, ``views`` ``aten::transpose`` of ``2 * VIEW_US``, each holding an
    ``aten::as_strided`` of ``VIEW_US``: what calling and recording an operator costs, whatever the micro-batch;
    the operator itself costs one call more than its share of the work."""
    for e in [e for e in events if e["name"] in WORK]:
        e["dur"] -= views * 2 * VIEW_US
        for k in range(views):
            at = e["ts"] + e["dur"] + k * 2 * VIEW_US
            events.append({**e, "name": "aten::transpose", "ts": at, "dur": 2 * VIEW_US})
            events.append({**e, "name": "aten::as_strided", "ts": at + 0.5 * VIEW_US, "dur": VIEW_US})


def _loss(loss_us: float, last: int, rank: int, events: list) -> None:
    """On the last stage, the end of each forward (its range and its operator) is its loss, ``aten::nll_loss``
    after the range: the schedule's per-micro-batch work between a forward and the next phase (less the
    ``CALL_US`` in which the next receive is posted)."""
    if rank != last:
        return
    for e in [e for e in events if e["name"] in ("forward", WORK[0])]:
        e["dur"] -= loss_us
        if e["name"] == "forward":
            events.append({**e, "name": "aten::nll_loss", "cat": "cpu_op", "ts": e["ts"] + e["dur"],
                           "dur": loss_us - CALL_US})


def _accumulate(accumulate_us: float, rank: int, events: list) -> None:
    """The last ``accumulate_us`` of each backward's operator is a ``torch::autograd::AccumulateGrad`` holding the
    ``aten::add_`` that adds to the parameters' gradients: as long whatever the micro-batch."""
    for e in [e for e in events if e["name"] == WORK[1]]:
        e["dur"] -= accumulate_us
        at = e["ts"] + e["dur"]
        events.append({**e, "name": "torch::autograd::AccumulateGrad", "ts": at, "dur": accumulate_us})
        events.append({**e, "name": "aten::add_", "ts": at + 1.0, "dur": accumulate_us - 2.0})


def _median(report, attr: str) -> float:
    return statistics.median(getattr(s, attr) for s in report.steps)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
def test_what_calling_operators_costs_stays_per_micro_batch(tmp_path, kind):
    # each micro-batch's operator with 6 view operators after it, their calls' cost not shrinking with it
    report = whatif(_job(tmp_path, "four", kind, 4, (1, 1), views=6), [Change(MICRO_BATCHES, factor=8)])
    made = _median(whatif(_job(tmp_path, "eight", kind, 8, (1, 1), views=6), UNCHANGED), "measured_us")
    # within 1.5 % of the step: the 4 micro-batches more bring their sends' and receives' calls (about 11 µs each,
    # 1.1 % of GPipe's step), which are in no stage's work; the views' calls scaled with the rest would put the step
    # a quarter short
    assert _median(report, "predicted_us") == pytest.approx(made, rel=0.015)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
def test_twice_the_micro_batches_predicts_the_run_made_with_them(tmp_path, kind):
    report = whatif(_job(tmp_path, "four", kind, 4, (1, 1)), [Change(MICRO_BATCHES, factor=8)])
    made = _median(whatif(_job(tmp_path, "eight", kind, 8, (1, 1)), UNCHANGED), "measured_us")
    # within 1 % of the step: the calls' time outside the micro-batches' ranges is in no stage's work
    assert _median(report, "predicted_us") == pytest.approx(made, rel=0.01)
    # the schedule's theory, equal stages and free transfers: (m + p - 1)(f + b), each micro-batch's operators
    # halved, its calls kept: 5 x (350 + 8) µs -> 9 x (175 + 8) µs
    change = _median(report, "predicted_us") - _median(report, "measured_us")
    assert change == pytest.approx(9 * 183.0 - 5 * 358.0, abs=0.01 * made)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
def test_the_work_between_a_stages_phases_stays_per_micro_batch(tmp_path, kind):
    # the last stage's loss, 60 µs after each forward's range whatever the micro-batch: 4 micro-batches more bring
    # 4 more, on the critical path; read as nothing, the step comes 9 % (1F1B) or 5 % (GPipe) short
    report = whatif(_job(tmp_path, "four", kind, 4, (1, 1), loss_us=60.0), [Change(MICRO_BATCHES, factor=8)])
    made = _median(whatif(_job(tmp_path, "eight", kind, 8, (1, 1), loss_us=60.0), UNCHANGED), "measured_us")
    assert _median(report, "predicted_us") == pytest.approx(made, rel=0.015)


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
def test_the_gradients_accumulation_stays_per_micro_batch(tmp_path, kind):
    # each backward ends with 120 µs of adding to the parameters' gradients, their size whatever the micro-batch's:
    # 4 micro-batches more bring 4 more on each stage; halved with the rest, the step comes 17 % short
    report = whatif(_job(tmp_path, "four", kind, 4, (1, 1), accumulate_us=120.0), [Change(MICRO_BATCHES, factor=8)])
    made = _median(whatif(_job(tmp_path, "eight", kind, 8, (1, 1), accumulate_us=120.0), UNCHANGED), "measured_us")
    assert _median(report, "predicted_us") == pytest.approx(made, rel=0.015)


def _gpipe_ranges_too(rank, events):
    """torch's ScheduleGPipe's ``Forward i``/``Backward i`` around each of the capture's own ranges (rnnprof's
    GPipe workload records both), each from the end of the stage's work before it (300 µs at most): the wait for its
    input too."""
    seen, free = {"forward": 0, "backward": 0}, None
    for e in sorted([e for e in events if e["name"] in seen], key=lambda e: e["ts"]):
        start = e["ts"] - 0.5 if free is None else max(free, e["ts"] - 300.0)
        events.append({**e, "name": f"{e['name'].capitalize()} {seen[e['name']]}", "ts": start,
                       "dur": e["ts"] + e["dur"] + 0.5 - start})
        seen[e["name"]] += 1
        free = e["ts"] + e["dur"] + 0.5


@pytest.mark.parametrize("ranges, edit", [("gpipe", None), (True, _gpipe_ranges_too)],
                         ids=["torch's ranges alone", "both, read once"])
def test_torchs_gpipe_ranges_tell_the_micro_batches_apart(tmp_path, ranges, edit):
    # a user's GPipe script records only torch's ranges; rnnprof's GPipe records its own inside torch's
    report = whatif(_job(tmp_path, "four", "gpipe", 4, (1, 1), ranges=ranges, edit=edit),
                    [Change(MICRO_BATCHES, factor=8)])
    made = _median(whatif(_job(tmp_path, "eight", "gpipe", 8, (1, 1)), UNCHANGED), "measured_us")
    assert abs(_median(report, "predicted_us") - _median(report, "measured_us")) > 100.0  # it changes the step
    assert _median(report, "predicted_us") == pytest.approx(made, rel=0.01)


@pytest.mark.parametrize("change", [Change(MICRO_BATCHES, factor=8), Change(MOVE_LAYER, "2,2:3,1")])
def test_a_job_whose_micro_batches_cannot_be_told_apart_is_refused(tmp_path, change):
    # a 1F1B script's trace without ranges around its micro-batches (torch's Schedule1F1B records none): refused
    # rather than replayed as no change
    table = _job(tmp_path, "job", "1f1b", 4, (2, 2), ranges=False)
    with pytest.raises(ChangeError, match="no step holds a pipeline to replay"):
        whatif(table, [change])


def test_a_job_that_is_no_pipeline_is_refused_in_one_line(capsys):
    code = main(["whatif", "tests/data/torch-gloo-fsdp", "--micro-batches", "8"])
    out, err = capsys.readouterr()
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "no step holds a pipeline" in err and "Traceback" not in err


def test_a_pipeline_computing_on_gpus_is_refused(tmp_path):
    def kernels_of_the_operators(rank, events):  # each operator launches a kernel on the rank's GPU, as on CUDA
        for n, e in enumerate([e for e in events if e["name"] in WORK]):
            correlation = 1000 * (rank + 1) + n
            events.append({**e, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": e["ts"] + 1.0, "dur": 4.0,
                           "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": rank, "tid": 7,
                           "ts": e["ts"] + 6.0, "dur": e["dur"],
                           "args": {"device": rank, "stream": 7, "correlation": correlation}})

    table = _job(tmp_path, "job", "1f1b", 4, (2, 2), edit=kernels_of_the_operators)
    with pytest.raises(ChangeError, match="rank0 computes on a GPU"):
        whatif(table, [Change(MICRO_BATCHES, factor=8)])


def test_an_interleaved_schedule_is_refused(tmp_path):
    def two_stages_on_rank_0(rank, events):  # the PP: ranges of an interleaved schedule's first rank
        if rank == 0:
            first = min(e["ts"] for e in events if e["name"] == "forward")
            events += [{**events[0], "name": f"PP:{stage}F0", "ts": first + stage, "dur": 1.0} for stage in (0, 2)]

    table = _job(tmp_path, "job", "1f1b", 4, (2, 2), edit=two_stages_on_rank_0)
    with pytest.raises(ChangeError, match="runs stages 0, 2"):
        whatif(table, [Change(MICRO_BATCHES, factor=8)])


@pytest.mark.parametrize("kind, before, after", [("1f1b", (3, 1), (2, 2)), ("gpipe", (3, 1), (2, 2)),
                                                 ("1f1b", (1, 2, 1), (1, 1, 2)), ("1f1b", (5, 1), (3, 3))])
def test_a_layer_moved_predicts_the_run_made_with_it(tmp_path, kind, before, after):
    # (5, 1): the last stage waits for its next input after every backward, in its send's run and its receive's
    # call, as gloo records them; read as the stage's work between phases, the step came 10 % long
    move = ",".join(map(str, before)) + ":" + ",".join(map(str, after))
    report = whatif(_job(tmp_path, "before", kind, 4, before), [Change(MOVE_LAYER, move)])
    made = _median(whatif(_job(tmp_path, "after", kind, 4, after), UNCHANGED), "measured_us")
    assert abs(_median(report, "predicted_us") - _median(report, "measured_us")) > 100.0  # it changes the step
    # within 1 % of the step: a layer's time is taken with its share of the stage's calls
    assert _median(report, "predicted_us") == pytest.approx(made, rel=0.01)


def test_a_split_of_other_stages_is_refused(tmp_path):
    table = _job(tmp_path, "job", "1f1b", 4, (3, 1))
    with pytest.raises(ChangeError, match="has 2 stages, not 3"):
        whatif(table, [Change(MOVE_LAYER, "1,2,1:1,1,2")])

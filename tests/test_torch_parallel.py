"""--framework torch --parallel: each mode's collectives against torch's CommDebugMode, its losses against the
algorithm it equals (DDP, or one process training the same batches), a pipeline's micro-batches and sends, the
flags that cannot work refused before torch loads, and the committed run directories of fsdp, tp and pp.

Why the losses may be compared closely: FSDP and HSDP average the same gradients that DDP averages (a reduce-scatter
of the sum, divided by the ranks, is the all-reduce's average cut into shards), tensor parallelism computes the same
products as one process with the sums over the sliced dimension split in two and added, and a pipeline with equal
micro-batches takes the mean of their mean losses, which is the batch's mean loss, with gradients scaled by 1/M. Each
differs from its reference only in the order float32 sums are taken: a relative 1e-7 per operation, about 1e-6
after three steps of SGD. The tolerance, a relative 1e-5, is a hundred times smaller than what one step moves the loss
here (checked below), so a rank that skipped the averaging, a step or a micro-batch fails.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gzip
import json
import math
import os
import re
import subprocess
import sys
import uuid
from io import StringIO

import pytest

from fixtures import FIXTURES, PARALLEL_RUNS
from rnnprof.models.config import TorchOptions, WorkloadConfig

STEPS = 3
TOLERANCE = 1e-5
LAYERS = 3
# The committed runs' model (make_torch_parallel_traces.py): 3 blocks of 16 units, 2 heads
TINY = dict(model="transformer", layers=LAYERS, units=16, vocab_size=60, src_max_len=6, batch_size=4, warmup=0,
            batches=1, optimizer="sgd", learning_rate=0.5)
KINDS = {"_allgather_base_": "all-gather", "_reduce_scatter_base_": "reduce-scatter", "allreduce_": "all-reduce",
         "all_reduce": "all-reduce"}

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")


def tiny(devices=2, parallel="ddp", **changes) -> TorchOptions:
    workload = {**TINY, "devices": devices, **{k: v for k, v in changes.items() if k in TINY}}
    torch_fields = {k: v for k, v in changes.items() if k not in TINY}
    return TorchOptions(workload=WorkloadConfig(**workload), heads=2, parallel=parallel, **torch_fields)


# -- the ranks' job: every case trained in one launch --------------------------------------------------------------

class _Phases:
    """A training's ``phase``: counts each range it is asked for."""

    def __init__(self):
        self.counts = collections.Counter()

    def __call__(self, name):
        self.counts[name] += 1
        return contextlib.nullcontext()


def _train_case(options, rank, distributed=True) -> dict:
    """``STEPS`` steps of ``options``; the last under CommDebugMode (a pipeline: counted phases instead, since
    CommDebugMode's module tracking fails inside torch.distributed.pipelining)."""
    import torch
    from torch.distributed.tensor.debug import CommDebugMode

    from rnnprof.training.torch_memory import model_state_bytes
    from rnnprof.training.torch_training import TorchTraining

    training = TorchTraining(options, rank=rank, device="cpu", distributed=distributed)
    phases, losses, counts = _Phases(), [], collections.Counter()
    training.phase = phases
    for step in range(STEPS):
        if step == STEPS - 1 and training.pipeline is None:
            with CommDebugMode() as comm:
                losses.append(training.step().loss)
            for op, n in comm.get_comm_counts().items():
                counts[KINDS[str(op).split(".")[-1]]] += n
        else:
            losses.append(training.step().loss)
    modules = training.pipeline.modules if training.pipeline is not None else [training.model]
    blocks = sorted({name.split(".")[1] for m in modules for name, _ in m.named_parameters()
                     if name.startswith("layers.")})
    return {"losses": losses, "comm": dict(counts), "phases": dict(phases.counts), "groups": training.groups,
            "blocks": blocks, "head": any(name.startswith("head.") for m in modules for name, _ in m.named_parameters()),
            # what a rank of scale's run reports as its model state (rank_main: PeakMemory.read)
            "model_state": model_state_bytes(torch, training.parameter_list, training.optimizer)}


def parallel_job(cases: dict, references: dict) -> dict:
    """One rank of the test's launch: each case in turn (all ranks), then rank 0 alone trains each reference in one
    process (``devices=1``)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        results = {name: _train_case(options, rank) for name, options in cases.items()}
        if rank == 0:
            results.update({name: _train_case(options, 0, distributed=False) for name, options in references.items()})
        dist.barrier()
        return results
    finally:
        dist.destroy_process_group()


# The modules the ranks' modes use beyond torch: DDP's import of torch._dynamo, FSDP2's, tensor parallelism's and
# pipelining's of DTensor (which brings sympy) take 2-3 s of CPU, more than a rank's training here.
PRELOADED = ("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.tensor.parallel",
             "torch.distributed.tensor.debug", "torch.distributed.pipelining",
             "torch.distributed._composable.replicate_with_fsdp", "torch.nn.parallel")

# A fresh interpreter that runs ``_launch_here`` once per line on its stdin, ``ARGUMENTS RESULT``: the pickled
# arguments in file ARGUMENTS, its result pickled into file RESULT; it answers each line with one, "done".
LAUNCHER = ("import pickle, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import test_torch_parallel\n"
            "for line in sys.stdin:\n"
            "    arguments, result = line.split()\n"
            "    with open(arguments, 'rb') as f:\n"
            "        ranks = test_torch_parallel._launch_here(*pickle.load(f))\n"
            "    with open(result, 'wb') as f:\n"
            "        pickle.dump(ranks, f)\n"
            "    print('done', flush=True)\n")


LAUNCH_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """``launch(processes, cases, references)``: ``parallel_job`` on ``processes`` ranks started by torch's elastic
    agent (as ``torchrun --standalone``), their results by rank. The module's launches run in one fresh interpreter
    that imports torch and ``PRELOADED`` once and forks the ranks from itself: spawned, each rank imported them
    again. Not forked from this process: it runs other tests' threads (TensorFlow's, a chart converter's), and a
    fork can inherit a lock one of them holds."""
    import pickle
    import select

    folder = tmp_path_factory.mktemp("launches")
    with open(folder / "stderr", "w") as stderr:
        launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, os.path.dirname(os.path.abspath(__file__))],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)

    def run(processes: int, cases: dict, references: dict) -> list[dict]:
        arguments, result = folder / f"arguments{processes}.pickle", folder / f"result{processes}.pickle"
        arguments.write_bytes(pickle.dumps((processes, cases, references)))
        launcher.stdin.write(f"{arguments} {result}\n")
        launcher.stdin.flush()
        answered = select.select([launcher.stdout], [], [], LAUNCH_TIMEOUT_S)[0]
        if not answered or launcher.stdout.readline().strip() != "done":
            launcher.kill()
            launcher.wait()
            pytest.fail(f"the launch of {processes} ranks failed: {(folder / 'stderr').read_text()[-3000:]}")
        return pickle.loads(result.read_bytes())

    try:
        yield run
    finally:
        launcher.stdin.close()
        try:
            launcher.wait(timeout=60)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
            launcher.stdout.close()


def _launch_here(processes: int, cases: dict, references: dict) -> list[dict]:
    """``launch``'s fresh interpreter: the ranks forked from it, so that they inherit its imports."""
    import importlib
    import tempfile

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    for name in PRELOADED:
        importlib.import_module(name)
    with tempfile.TemporaryDirectory() as logs:
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=uuid.uuid4().hex,
                              rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, start_method="fork",
                              monitor_interval=0.1, logs_specs=DefaultLogsSpecs(log_dir=logs, redirects=Std.ALL))
        results = elastic_launch(config, parallel_job)(cases, references)
    return [results[rank] for rank in range(processes)]


TWO_RANK_CASES = {
    "ddp": tiny(),
    "fsdp": tiny(parallel="fsdp"),
    "fsdp-no-reshard": tiny(parallel="fsdp", reshard_after_forward=False),
    "fsdp-prefetch": tiny(parallel="fsdp", forward_prefetch=1, backward_prefetch=2),
    "tp": tiny(parallel="tp"),
    "pp-1f1b": tiny(parallel="pp", schedule="1f1b", micro_batches=4),
    "pp-1f1b-1,2": tiny(parallel="pp", schedule="1f1b", micro_batches=4, stage_layers=(1, 2)),
    "pp-gpipe": tiny(parallel="pp", schedule="gpipe", micro_batches=2),
    "pp-interleaved": tiny(parallel="pp", schedule="interleaved-1f1b", micro_batches=4, layers=4),
    "lstm-fsdp": TorchOptions(workload=WorkloadConfig(model="rnnlm", layers=2, units=16, embedding=16, vocab_size=60,
                                                      src_max_len=6, batch_size=4, devices=2, warmup=0, batches=1,
                                                      optimizer="sgd", learning_rate=0.5), parallel="fsdp"),
}
REFERENCES = {"one-process": tiny(devices=1), "one-process-4-blocks": tiny(devices=1, layers=4)}


@pytest.fixture(scope="module")
def two_ranks(launch):
    pytest.importorskip("torch")
    return launch(2, TWO_RANK_CASES, REFERENCES)


def close(a, b) -> bool:
    return all(math.isclose(x, y, rel_tol=TOLERANCE) for x, y in zip(a, b, strict=True))


def test_the_reference_losses_move_by_far_more_than_the_tolerance(two_ranks):
    for name in REFERENCES:
        losses = two_ranks[0][name]["losses"]
        assert min(abs(b - a) for a, b in zip(losses, losses[1:])) > 100 * TOLERANCE * losses[0], losses


@pytest.mark.parametrize("case", ["fsdp", "fsdp-no-reshard", "fsdp-prefetch"])
def test_fsdp_trains_as_ddp_does(two_ranks, case):
    for rank in two_ranks:
        assert close(rank[case]["losses"], rank["ddp"]["losses"]), (rank[case]["losses"], rank["ddp"]["losses"])
    assert not close(two_ranks[0]["ddp"]["losses"], two_ranks[1]["ddp"]["losses"])  # the ranks' batches differ


def test_fsdp2_gathers_each_block_twice_and_the_root_once_and_reduce_scatters_each_once(two_ranks):
    """CommDebugMode: a block's parameters are gathered for its forward and again for its backward (resharded
    after forward), the root's once; each of the L blocks and the root reduce-scatters its gradients once."""
    for rank in two_ranks:
        assert rank["fsdp"]["comm"] == {"all-gather": 2 * LAYERS + 1, "reduce-scatter": LAYERS + 1}
        assert rank["fsdp-prefetch"]["comm"] == rank["fsdp"]["comm"]  # prefetch moves the all-gathers, adds none
        assert rank["fsdp-no-reshard"]["comm"] == {"all-gather": LAYERS + 1, "reduce-scatter": LAYERS + 1}
        assert rank["lstm-fsdp"]["comm"] == {"all-gather": 3, "reduce-scatter": 2}  # the nn.LSTM is one block
        assert rank["ddp"]["comm"] == {"all-reduce": 1}  # the tiny model's gradients fill one bucket


def test_tensor_parallel_trains_as_one_process_and_all_reduces_six_times_a_block(two_ranks):
    """Both ranks train the same batches, as one process would; each block all-reduces its two row-split outputs in
    forward and its four column-split projections' input gradients in backward."""
    reference = two_ranks[0]["one-process"]["losses"]
    for rank in two_ranks:
        assert close(rank["tp"]["losses"], reference), (rank["tp"]["losses"], reference)
        assert rank["tp"]["comm"] == {"all-reduce": 6 * LAYERS}


@pytest.mark.parametrize("case, micro, per_rank", [("pp-1f1b", 4, 1), ("pp-1f1b-1,2", 4, 1), ("pp-gpipe", 2, 1),
                                                   ("pp-interleaved", 4, 2)])
def test_a_pipeline_runs_the_micro_batches_asked_and_trains_as_one_process(two_ranks, case, micro, per_rank):
    """Each rank runs the forward and the backward of every micro-batch once per stage it holds, and the update once
    a step; the rank with the last stage reports the batch's loss, one process's loss on the same batches."""
    for rank in two_ranks:
        assert rank[case]["phases"] == {"forward": STEPS * micro * per_rank, "backward": STEPS * micro * per_rank,
                                        "optimizer": STEPS}
    reference = two_ranks[0]["one-process-4-blocks" if case == "pp-interleaved" else "one-process"]["losses"]
    last = two_ranks[1][case]["losses"]  # stage 1 of 2, or stage 3 of 4 (rank 1 holds stages 1 and 3)
    assert close(last, reference), (last, reference)
    assert all(math.isnan(loss) for loss in two_ranks[0][case]["losses"])


def test_stage_layers_choose_the_blocks_each_stage_holds(two_ranks):
    """--stage-layers 1,2 moves block 1 from the first stage to the second (the default splits 3 blocks 2,1)."""
    assert [rank["pp-1f1b"]["blocks"] for rank in two_ranks] == [["0", "1"], ["2"]]
    assert [rank["pp-1f1b-1,2"]["blocks"] for rank in two_ranks] == [["0"], ["1", "2"]]
    assert [rank["pp-interleaved"]["blocks"] for rank in two_ranks] == [["0", "2"], ["1", "3"]]
    assert [rank["pp-1f1b"]["head"] for rank in two_ranks] == [False, True]


def trace_events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def per_step(events, count) -> dict:
    """``ProfilerStep#N -> count(the events that start within it)``."""
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e["name"].startswith("ProfilerStep#"))
    return {name: count([e for e in events if start <= e["ts"] < end]) for start, end, name in steps}


def c10d_collectives(events) -> dict:
    found = collections.Counter()
    for e in events:
        match = re.match(r"^c10d::(\w+)$", e["name"]) if e.get("cat") == "cpu_op" else None
        if match and match.group(1) in KINDS:
            found[KINDS[match.group(1)]] += 1
    return dict(found)


@pytest.mark.parametrize("mode", ["fsdp", "tp"])
def test_each_committed_step_issues_the_collectives_commdebugmode_counts(two_ranks, mode):
    """The committed traces ran the model of the live cases: every traced step of every rank holds the c10d calls
    that CommDebugMode counted in a step of the same configuration."""
    for rank in range(2):
        steps = per_step(trace_events(FIXTURES / f"torch-gloo-{mode}" / "torch" / f"rank{rank}.json.gz"),
                         c10d_collectives)
        assert list(steps) == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
        assert all(found == two_ranks[rank][mode]["comm"] for found in steps.values()), steps


# -- the committed run directories ----------------------------------------------------------------------------------

def phase_ranges(events) -> dict:
    return dict(collections.Counter(e["name"] for e in events if e.get("cat") == "user_annotation"
                                    and e["name"] in ("forward", "backward", "optimizer")))


@pytest.mark.parametrize("run", PARALLEL_RUNS)
def test_the_committed_runs_mark_each_step_and_its_phases(run):
    manifest = json.loads((FIXTURES / run / "manifest.json").read_text())
    assert manifest["framework"] == "torch" and manifest["backend"] == "gloo" and manifest["world_size"] == 2
    assert manifest["parallel"]["mode"] == run.split("-")[-1] and manifest["profiled_steps"] == [3, 4, 5]
    micro = manifest["parallel"]["micro_batches"] or 1
    for rank in range(2):
        path = FIXTURES / run / "torch" / f"rank{rank}.json.gz"
        assert path.stat().st_size < 330_000
        steps = per_step(trace_events(path), phase_ranges)
        assert list(steps.values()) == [{"forward": micro, "backward": micro, "optimizer": 1}] * 3, steps


def test_the_committed_pipeline_sends_each_micro_batch_s_activations_and_gradients():
    """1F1B over 2 stages: stage 0 sends the activations of each of the 4 micro-batches and receives their gradients;
    stage 1 the reverse."""
    manifest = json.loads((FIXTURES / "torch-gloo-pp" / "manifest.json").read_text())
    assert manifest["parallel"]["schedule"] == "1f1b" and manifest["parallel"]["stage_layers"] == [2, 1]
    for rank in range(2):
        events = trace_events(FIXTURES / "torch-gloo-pp" / "torch" / f"rank{rank}.json.gz")
        p2p = per_step(events, lambda found: dict(collections.Counter(
            e["name"] for e in found if e.get("cat") == "cpu_op" and e["name"] in ("c10d::send", "c10d::recv_"))))
        assert list(p2p.values()) == [{"c10d::send": 4, "c10d::recv_": 4}] * 3, p2p


# -- flags that cannot work ----------------------------------------------------------------------------------------

SMALL = ["--framework", "torch", "--model", "transformer", "--layers", "3", "--units", "16", "--heads", "2",
         "--batch-size", "4", "--vocab-size", "60", "--src-max-len", "6"]
LSTM = ["--framework", "torch", "--model", "rnnlm", "--devices", "2"]
REFUSALS = [
    (["--parallel", "pp", "--devices", "1"], "--parallel pp needs at least 2 ranks, got --devices 1"),
    (["--parallel", "hsdp", "--devices", "4", "--mesh", "2x3"], "--mesh 2x3 holds 6 ranks but --devices is 4"),
    (["--parallel", "hsdp", "--devices", "2"], "--parallel hsdp needs a 2-D mesh (replicate x shard)"),
    (["--parallel", "tp", "--units", "15", "--heads", "1"], "--units 15 does not split over the 2 tensor-parallel"),
    (["--parallel", "fsdp+tp", "--devices", "4", "--heads", "3", "--units", "18"],
     "--heads 3 does not split over the 2 tensor-parallel ranks"),
    (["--parallel", "pp", "--micro-batches", "3"], "--batch-size 4 does not split into 3 equal micro-batches"),
    (["--parallel", "pp", "--micro-batches", "1"], "--schedule 1f1b needs at least as many micro-batches as stages"),
    (["--parallel", "pp", "--stage-layers", "2,2"], "--stage-layers 2,2 must give each stage at least one block"),
    (["--parallel", "pp", "--stage-layers", "1,1,1"], "names 3 stage(s) but the pipeline has 2"),
    (["--parallel", "pp", "--schedule", "interleaved-1f1b", "--stages-per-rank", "1"], "--stages-per-rank must be"),
    (["--parallel", "pp", "--schedule", "interleaved-1f1b"], "--layers 3 cannot fill 4 pipeline stages"),
    (["--parallel", "pp", "--tied"], "--tied shares the embedding table"),
    (["--parallel", "fsdp", "--schedule", "gpipe"], "--schedule applies to --parallel pp, pp+dp"),
    (["--parallel", "ddp", "--forward-prefetch", "1"], "--forward-prefetch applies to --parallel fsdp, hsdp, fsdp+tp"),
    (["--parallel", "fsdp", "--backward-prefetch", "3"], "--backward-prefetch 3 reaches past the last block"),
    (["--parallel", "fsdp", "--mesh", "1x2"], "--mesh applies to --parallel hsdp, fsdp+tp, pp+dp"),
    (["--parallel", "tp", "--bucket-cap-mb", "4"], "--bucket-cap-mb applies to --parallel ddp; none"),
    (["--parallel", "fsdp", "--variable-update", "independent"], "--variable-update independent trains unconnected"),
    (["--parallel", "tp", "--clip-norm", "1"], "--clip-norm does not combine with --parallel tp"),
]
OTHER_REFUSALS = [
    (["scale", *LSTM, "--parallel", "tp"], "--parallel tp applies to --model transformer, not the LSTM LM"),
    (["scale", *LSTM, "--parallel", "pp"], "--parallel pp applies to --model transformer, not the LSTM LM"),
    (["scale", "--model", "transformer", "--devices", "1"], "--model transformer applies to --framework torch"),
    (["scale", "--model", "nmt", "--parallel", "fsdp"], "--parallel applies to --framework torch"),
    (["scale", "--framework", "torch", "--model", "rnnlm", "--heads", "2"], "--heads applies to --model transformer"),
    (["scale", *SMALL, "--parallel", "fsdp", "--explain", "--devices", "2"], "--explain reads each run as replicas"),
    (["trace", *SMALL, "--parallel", "pp", "--devices", "2", "--mesh", "2x1"], "--mesh applies to the 2-D modes"),
    (["trace", *SMALL, "--parallel", "pp+dp", "--devices", "4", "--mesh", "4x1"], "each dimension of --parallel"),
]


def test_combinations_that_cannot_work_are_one_line_exit_2_before_torch_loads():
    cases = [["scale", *SMALL, "--devices", "2", *argv] for argv, _ in REFUSALS] + [argv for argv, _ in OTHER_REFUSALS]
    script = ("import sys, json\nfrom rnnprof.cli import main\n"
              "codes = [main(argv) for argv in json.loads(sys.argv[1])]\n"
              "print(json.dumps([codes, 'torch' in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], capture_output=True, text=True, timeout=120)
    codes, torch_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert codes == [2] * len(cases) and len(lines) == len(cases), out.stderr
    assert not torch_loaded
    for line, (_, message) in zip(lines, REFUSALS + OTHER_REFUSALS):
        assert message in line, line


# -- scale, as a user runs it --------------------------------------------------------------------------------------

def parameters(v, d, t, blocks) -> int:
    """The Transformer LM's parameter count, written out: token and position embeddings, per block two layer norms
    (weight and bias), four d x d attention projections, the MLP's d x 4d and 4d x d with their biases, the final
    norm and the head."""
    return v * d + t * d + blocks * (2 * 2 * d + 4 * d * d + (d * 4 * d + 4 * d) + (4 * d * d + d)) + 2 * d + v * d


def test_a_rank_holds_the_whole_model_state_under_ddp_and_a_shard_of_it_under_fsdp(two_ranks):
    """SGD keeps no state: a rank holds its parameters and their gradients, whole under DDP, a shard of each under
    FSDP (the shards add up to the whole)."""
    whole = 2 * 4 * parameters(60, 16, 6, LAYERS)
    assert [rank["ddp"]["model_state"] for rank in two_ranks] == [whole, whole]
    shards = [rank["fsdp"]["model_state"] for rank in two_ranks]
    assert sum(shards) == whole and max(shards) < whole


@pytest.mark.slow
def test_scale_reports_fsdp_throughput_peak_memory_and_model_state():
    """scale --parallel as a user runs it, on the mode whose figures differ from DDP's (its mesh, its sharded model
    state). Several modes in one sweep are one launch each, rows in the order given: the table and the document of
    several modes, test_each_mode_is_its_own_table_with_its_mesh_peak_memory_and_model_state; DDP's whole model
    state per rank, test_a_rank_holds_the_whole_model_state_under_ddp_and_a_shard_of_it_under_fsdp."""
    from rich.console import Console

    from rnnprof.cli import main

    buffer = StringIO()
    argv = ["scale", *SMALL, "--vocab-size", "60", "--src-max-len", "6", "--batch-size", "4", "--optimizer", "sgd",
            "--devices", "2", "--parallel", "fsdp", "--warmup", "0", "--batches", "2", "--json"]
    assert main(argv, console=Console(file=buffer, width=200)) == 0
    document = json.loads(buffer.getvalue())
    (fsdp,) = document["rows"]
    assert fsdp["parallel"] == "fsdp" and document["config"]["parallel"] == ["fsdp"]
    assert fsdp["words"] == 2 * 2 * 4 * 6  # 2 steps of 2 ranks' batches of 4 windows of 6 tokens
    assert fsdp["batch_total"] == 8
    assert fsdp["layout"]["mesh_dims"] == ["dp"] and fsdp["layout"]["mesh_shape"] == [2]
    assert fsdp["peak_memory_source"] == "rss_peak_growth" and all(b > 0 for b in fsdp["peak_memory_bytes_per_rank"])
    whole = 2 * 4 * parameters(60, 16, 6, 3)
    assert sum(fsdp["model_state_bytes_per_rank"]) == whole and max(fsdp["model_state_bytes_per_rank"]) < whole
    assert "resident memory" in document["definitions"]["peak_memory_bytes"]


# -- four ranks: the 2-D meshes ------------------------------------------------------------------------------------

FOUR_RANK_CASES = {
    "ddp": tiny(devices=4),
    "hsdp": tiny(devices=4, parallel="hsdp", mesh=(2, 2)),
    "fsdp+tp": tiny(devices=4, parallel="fsdp+tp", mesh=(2, 2)),
    "pp+dp": tiny(devices=4, parallel="pp+dp", mesh=(2, 2), micro_batches=2),
}


@pytest.mark.slow
def test_two_dimensional_meshes_place_the_ranks_as_init_device_mesh_does_and_train_as_ddp(launch, two_ranks):
    from rnnprof.training.torch_layout import plan_layout

    four = launch(4, FOUR_RANK_CASES, {})
    for name, options in FOUR_RANK_CASES.items():
        layout = plan_layout(options)
        for rank, result in enumerate(four):
            where = layout.coordinates(rank)
            for dim, group in result[name]["groups"].items():  # the ranks that differ from this one along dim only
                expected = [r for r in range(4) if all(layout.coordinates(r)[d] == where[d]
                                                       for d in layout.mesh_dims if d != dim)]
                assert group["ranks"] == expected, (name, rank, dim)
    for rank in range(4):
        assert close(four[rank]["hsdp"]["losses"], four[rank]["ddp"]["losses"])
        # dp x tp: rank r trains the batches of data rank r // 2, as rank r // 2 of a 2-rank DDP does
        assert close(four[rank]["fsdp+tp"]["losses"], two_ranks[rank // 2]["ddp"]["losses"])
        assert four[rank]["hsdp"]["comm"] == {"all-gather": 2 * LAYERS + 1, "reduce-scatter": LAYERS + 1,
                                              "all-reduce": LAYERS + 1}  # each shard's gradient across the replicas
        assert four[rank]["fsdp+tp"]["comm"] == {"all-gather": 2 * LAYERS + 1, "reduce-scatter": LAYERS + 1,
                                                 "all-reduce": 6 * LAYERS}
    for rank in (2, 3):  # pp x dp: the last stage's ranks hold data ranks 0 and 1
        assert close(four[rank]["pp+dp"]["losses"], two_ranks[rank - 2]["ddp"]["losses"])


# -- scale's table and document of several modes (no run) -------------------------------------------------------------

def test_each_mode_is_its_own_table_with_its_mesh_peak_memory_and_model_state():
    from rich.console import Console

    from rnnprof.analyzers.scale import MemoryFigures, ScalePoint, speedup_table
    from rnnprof.analyzers.throughput import TimingSummary
    from rnnprof.reports.scale import render_table, to_document
    from rnnprof.training.torch_layout import plan_layout
    from rnnprof.training.torch_memory import PEAK_SOURCES

    def point(options, words_per_second, peak, state):
        timing = TimingSummary(steps=2, total_seconds=1.0, words=int(words_per_second), words_per_second=words_per_second,
                               mean_step_seconds=0.5, median_step_seconds=0.5, std_step_seconds=0.0)
        return ScalePoint(variable_update="replicated", all_reduce=None, devices=options.workload.devices,
                          per_device_batch=4, total_batch=4 * plan_layout(options).data_ranks, timed=timing,
                          parallel=options.parallel, layout=plan_layout(options).to_dict(),
                          memory=MemoryFigures(peak_per_rank=peak, source="rss_peak_growth", model_state_per_rank=state))

    mib = 1024 * 1024
    points = [point(tiny(devices=1, parallel="fsdp"), 100.0, (10 * mib,), (4 * mib,)),
              point(tiny(parallel="fsdp"), 150.0, (7 * mib, 9 * mib), (2 * mib, 2 * mib)),
              point(tiny(parallel="pp", micro_batches=4), 120.0, (5 * mib, 6 * mib), (3 * mib, 1 * mib))]
    result = speedup_table(points)
    assert [row.speedup for row in result.rows] == [1.0, 1.5, 1.0]  # each mode against its own smallest run
    assert result.notes == ("--parallel pp: no 1-device run in the sweep; speedup is relative to 2 devices",)
    buffer = StringIO()
    render_table(result, model="transformer", words_definition="words", warmup=1, batches=2, include_warmup=False,
                 notes=[], console=Console(file=buffer, width=200), memory_sources=PEAK_SOURCES)
    rows = [line.split() for line in buffer.getvalue().splitlines() if line.strip().endswith("x")]
    assert [row[-3:] for row in rows] == [["10.0", "4.0", "1.00x"], ["9.0", "2.0", "1.50x"], ["6.0", "3.0", "1.00x"]]
    assert "pp 2, 2 stages 2,1, 4 mb" in buffer.getvalue() and "dp 2" in buffer.getvalue()
    document = to_document(result, config={}, words_definition="words", device_kind="cpu-processes", notes=[],
                           step_definition="", memory_sources=PEAK_SOURCES)
    fsdp = document["rows"][1]
    assert (fsdp["peak_memory_bytes"], fsdp["model_state_bytes"], fsdp["batch_total"]) == (9 * mib, 2 * mib, 8)
    assert document["rows"][2]["batch_total"] == 4  # a pipeline trains one batch
    assert PEAK_SOURCES["rss_peak_growth"] in document["definitions"]["peak_memory_bytes"]

"""Record Kineto traces of small sharded, tensor-parallel and pipelined CPU (gloo) trainings, with their oracles.

Each job trains a tiny Transformer language model for a few steps under ``torch.distributed.run``, each rank
profiled with ``torch.profiler`` (``schedule(wait=1, warmup=1, active=2)``, ``record_shapes=True``,
``ProfilerStep#N`` markers) and writing one gzipped Kineto JSON, ``torch-gloo-<job>-collectives-rank<r>.json.gz``:

- ``fsdp2``: FSDP2, ``fully_shard`` on each of 3 Transformer blocks and on the root (2 ranks); no phase ranges
  in the script: the trace's phases are autograd's and the optimizer's own;
- ``tp``: tensor parallel, ``parallelize_module`` with ``ColwiseParallel``/``RowwiseParallel`` on each block's
  feed-forward over a 1-D mesh (2 ranks), each step in ``record_function`` ranges ``forward``/``backward``/
  ``optimizer``;
- ``pp``: a 2-stage pipeline (``torch.distributed.pipelining``, ``Schedule1F1B``, 4 micro-batches; 2 ranks);
- ``hsdp``: HSDP, ``fully_shard`` over a 2 x 2 mesh (replicate x shard; 4 ranks);
- ``hsdp-fr``: the same HSDP job with torch's flight recorder on (``TORCH_FR_BUFFER_SIZE``): each rank also
  writes the recorder's entries of the traced window beside its trace, as ``rnnprof trace`` does
  (``rnnprof.recording.recorder_window``: ``torch-gloo-hsdp-fr-collectives-rank<r>.flight-recorder``), and its
  oracle names the mesh's groups as torch made them (``mesh``: each dimension's group name, description, ranks).

``--cuda`` runs ``fsdp2``, ``tp``, ``pp`` and ``hsdp`` on a machine's one GPU, every rank on ``cuda:0`` over nccl,
and names them ``torch-nccl-<job>-...``. NCCL refuses two ranks of one host on one GPU: each rank gives NCCL a host
of its own (``NCCL_HOSTID``), so their collectives go through NCCL's socket transport, as between two machines. The
ranks share the GPU's time, so these traces show what runs, where and in which group, not how fast it would run on a
GPU each. Their profiles hold the CUDA kernels and, for ``fsdp2``, the allocator's events (``profile_memory``); the
oracle adds each step's ``torch.cuda.max_memory_allocated()`` (``peak_allocated``, from a ``reset_peak_memory_stats``
at the step's start).

After the window, one more step runs under torch's ``CommDebugMode``, which counts the collectives it sees by
type, forward and backward; each rank writes them beside its trace with the tensors the script made
(``collectives-oracle-<job>-rank<r>.json``): the oracle of ``rnnprof comm``'s counts and bytes. CommDebugMode's module
tracker fails on a pipeline's micro-batches: for ``pp`` the oracle counts the sends and receives the schedule
issues instead.

    python tests/data/make_torch_sharded_traces.py [OUT_DIR] [JOB ...]     # default: this folder, every job
    python tests/data/make_torch_sharded_traces.py --cuda [OUT_DIR] [JOB ...]

The launcher re-runs this file as each rank's worker (``--worker JOB OUT_DIR``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from make_torch_gloo_traces import export_gzipped  # this folder: run as a script, it is on the path

STEPS = 5  # wait 1 + warmup 1 + active 2, then one step under CommDebugMode
VOCAB, DIM, HEADS, FFN, BLOCKS, BATCH, LENGTH = 64, 32, 2, 64, 3, 4, 8
MICRO_BATCHES = 4
JOBS = {"fsdp2": 2, "tp": 2, "pp": 2, "hsdp": 4, "hsdp-fr": 4}  # job -> ranks
CUDA_JOBS = ("fsdp2", "tp", "pp", "hsdp")
ON_CUDA = "RNNPROF_SHARDED_ON_CUDA"  # set by the launcher for its workers
RECORDER = "-fr"  # a job whose name ends so runs with the flight recorder on and writes its window's entries
FR_BUFFER = "2000"


def trace_name(job: str, rank: int, cuda: bool = False) -> str:
    return f"torch-{'nccl' if cuda else 'gloo'}-{job}-collectives-rank{rank}.json.gz"


def oracle_name(job: str, rank: int, cuda: bool = False) -> str:
    return f"collectives-oracle-{'nccl-' if cuda else ''}{job}-rank{rank}.json"


def worker(job: str, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    recorder, job = job.endswith(RECORDER), job.removesuffix(RECORDER)
    cuda = os.environ.get(ON_CUDA) == "1"
    if cuda:  # every rank on the one GPU, each on a host of its own for NCCL (its socket transport between them)
        os.environ["NCCL_HOSTID"] = f"rnnprof-rank{os.environ['RANK']}"
        torch.cuda.set_device(0)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    class Block(nn.Module):
        """Pre-norm attention and feed-forward."""

        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(DIM)
            self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
            self.norm2 = nn.LayerNorm(DIM)
            self.w1 = nn.Linear(DIM, FFN)
            self.w2 = nn.Linear(FFN, DIM)

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.w2(torch.relu(self.w1(self.norm2(x))))

    class LM(nn.Module):
        def __init__(self, blocks: int = BLOCKS, embed: bool = True, head: bool = True):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM) if embed else None
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.head = nn.Linear(DIM, VOCAB) if head else None

        def forward(self, x):
            if self.embed is not None:
                x = self.embed(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x) if self.head is not None else x

    oracle: dict = {"job": job + (RECORDER if recorder else ""), "rank": rank, "world_size": world, "torch": torch.__version__,
                    "profiled_steps": [2, 3], "comm_debug_mode_step": STEPS - 1, "device": str(device)}
    if cuda:
        oracle.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                      nccl=".".join(map(str, torch.cuda.nccl.version())))
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1 + rank)

    def batch():
        tokens = torch.randint(0, VOCAB, (BATCH, LENGTH + 1), generator=generator)
        return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)

    if job in ("fsdp2", "hsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,)) if job == "fsdp2" else \
            init_device_mesh(device.type, (2, world // 2), mesh_dim_names=("replicate", "shard"))
        model = LM().to(device)
        units = {f"blocks.{k}": block for k, block in enumerate(model.blocks)}
        full = {name: sum(p.numel() for p in unit.parameters()) for name, unit in units.items()}
        full["root"] = sum(p.numel() for p in model.parameters()) - sum(full.values())
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        units["root"] = model
        shard_size = world if job == "fsdp2" else world // 2

        def local(unit) -> int:
            own = {id(p) for other in model.blocks if other is not unit for p in other.parameters()} \
                if unit is model else set()
            return sum(p.to_local().numel() for p in unit.parameters() if id(p) not in own)

        if job == "hsdp":  # the groups as torch made them: the oracle of the groups comm names
            oracle["mesh"] = {"layout": mesh.mesh.tolist(), **{
                dim: {"name": group.group_name, "description": group.group_desc,
                      "ranks": dist.get_process_group_ranks(group)}
                for dim, group in ((d, mesh.get_group(d)) for d in ("replicate", "shard"))}}
        oracle["fsdp_units"] = {name: {"parameters": full[name], "local_shard_elements": local(unit),
                                       "shard_group_size": shard_size, "dtype": "float32"}
                                for name, unit in units.items()}
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def step(annotate: bool):
            inputs, targets = batch()
            loss = loss_fn(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    elif job == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh(device.type, (world,))
        model = LM().to(device)
        for block in model.blocks:
            parallelize_module(block, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        oracle["tp_blocks"] = BLOCKS
        oracle["tp_all_reduce_elements"] = BATCH * LENGTH * DIM  # a block's activations (forward) or their grad
        # one parameter at a time: on CUDA the foreach kernels would mix the blocks' DTensors with plain tensors
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)

        def step(annotate: bool):
            inputs, targets = batch()
            with record_function("forward") if annotate else _nothing():
                optimizer.zero_grad()
                loss = loss_fn(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))
            with record_function("backward") if annotate else _nothing():
                loss.backward()
            with record_function("optimizer") if annotate else _nothing():
                optimizer.step()
    elif job == "pp":
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        stage_blocks = BLOCKS + 1  # 2 blocks a stage
        first = rank == 0
        module = LM(blocks=stage_blocks // 2, embed=first, head=not first).to(device)
        example = torch.zeros(BATCH // MICRO_BATCHES, LENGTH, dtype=torch.long, device=device) if first else \
            torch.zeros(BATCH // MICRO_BATCHES, LENGTH, DIM, device=device)
        stage = PipelineStage(module, rank, world, device, input_args=(example,))
        schedule_ = Schedule1F1B(stage, MICRO_BATCHES,
                                 loss_fn=lambda out, tgt: loss_fn(out.reshape(-1, VOCAB), tgt.reshape(-1)))
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        oracle["pipeline"] = {"stages": world, "micro_batches": MICRO_BATCHES, "schedule": "1F1B",
                              "activation_elements": (BATCH // MICRO_BATCHES) * LENGTH * DIM,
                              "dtype": "float32"}

        def step(annotate: bool):
            inputs, targets = batch()
            if first:
                schedule_.step(inputs)
            else:
                schedule_.step(target=targets)
            optimizer.step()
            optimizer.zero_grad()
    else:
        raise SystemExit(f"unknown job {job!r}")

    name = job + (RECORDER if recorder else "")
    plain = out_dir / trace_name(name, rank, cuda).removesuffix(".gz")
    window_ns = [0]  # as the window's recording begins

    def ready(prof):
        if recorder:
            from rnnprof.recording.recorder_window import write_window

            write_window(torch, out_dir / trace_name(name, rank), rank, window_ns[0], time.time_ns())
        export_gzipped(prof, plain)

    peaks = []
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
                 schedule=schedule(wait=1, warmup=1, active=2), record_shapes=True,
                 profile_memory=cuda and job == "fsdp2", on_trace_ready=ready) as prof:
        for k in range(STEPS - 1):
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            step(annotate=True)
            if cuda:
                torch.cuda.synchronize()
                peaks.append(torch.cuda.max_memory_allocated())
            if k == 1:  # the next call begins the active steps
                window_ns[0] = time.time_ns()
            prof.step()
    if job == "pp":  # CommDebugMode's module tracker fails on a pipeline's micro-batches: count the P2P ops issued
        oracle["p2p_ops"] = _count_p2p(dist, lambda: step(annotate=False))
    else:
        with CommDebugMode() as mode:
            step(annotate=False)
        phases = mode.comm_module_counts.get("Global", {})
        oracle["comm_debug_mode"] = {
            "total": {str(op): n for op, n in mode.get_comm_counts().items()},
            **{phase: {str(op): n for op, n in phases.get(phase, {}).items()} for phase in ("forward", "backward")},
        }
    if cuda:
        oracle["peak_allocated"] = peaks  # per step of the loop, the profiled ones at [2, 3]
    (out_dir / oracle_name(name, rank, cuda)).write_text(json.dumps(oracle, indent=1, sort_keys=True) + "\n")
    dist.barrier()  # no rank tears its group down while another still talks to it
    dist.destroy_process_group()


def _count_p2p(dist, run) -> dict:
    """The sends and receives the pipeline's schedule issues while ``run()`` runs (its ``_batch_p2p``, through
    which every one of its P2P ops goes), by kind and peer: ops and elements."""
    from torch.distributed.pipelining import schedules

    counts: dict = {}
    original = schedules._batch_p2p

    def counting(ops, *args, **kwargs):
        for op in ops:
            kind = "send" if op.op in (dist.isend, dist.send) else "recv"
            entry = counts.setdefault(f"{kind} peer {op.peer}", {"ops": 0, "elements": 0})
            entry["ops"] += 1
            entry["elements"] += op.tensor.numel()
        return original(ops, *args, **kwargs)

    schedules._batch_p2p = counting
    try:
        run()
    finally:
        schedules._batch_p2p = original
    return counts


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def launch(out_dir: Path, jobs=tuple(JOBS), timeout_s: float = 300, cuda: bool = False) -> list[Path]:
    """Run each job; returns the trace paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", **({ON_CUDA: "1"} if cuda else {}))
    paths = []
    for job in jobs:
        recorder = {"TORCH_FR_BUFFER_SIZE": FR_BUFFER} if job.endswith(RECORDER) else {}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(JOBS[job]),
                        "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                        __file__, "--worker", job, str(out_dir)],
                       check=True, env={**env, **recorder}, timeout=timeout_s)
        paths += [out_dir / trace_name(job, r, cuda) for r in range(JOBS[job])]
    return paths


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], Path(sys.argv[3]))
    else:
        args = sys.argv[1:]
        on_cuda = bool(args) and args[0] == "--cuda"
        args = args[1:] if on_cuda else args
        folder = Path(args.pop(0)) if args and args[0] not in JOBS else Path(__file__).parent
        print("\n".join(map(str, launch(folder, tuple(args) or (CUDA_JOBS if on_cuda else tuple(JOBS)),
                                         cuda=on_cuda))))

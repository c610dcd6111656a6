"""One process's share of a PyTorch run: the model (the LSTM LM or the Transformer LM), its optimizer and a
timed ``step()``.

In a multi-process run every rank builds one ``TorchTraining`` (``rnnprof.training.torch_ddp``). ``--parallel
ddp`` (with ``replicated``) wraps the model in ``DistributedDataParallel``, so ``backward()`` all-reduces the
gradients and every rank applies the same averaged update; ``independent`` exchanges nothing. The other modes
shard, slice or split the model (``torch_parallel``), each rank taking the batch of its data-parallel
coordinate (``torch_layout``).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from rnnprof.models.config import TorchOptions
from rnnprof.frameworks.torch import import_torch
from rnnprof.training import torch_parallel
from rnnprof.training.measure import StepResult
from rnnprof.training.torch_layout import Layout, plan_layout

EVAL_SEED_OFFSET = 7919  # evaluation batches come from their own stream


def no_phase(name: str):
    """The default ``TorchTraining.phase``: no range."""
    return contextlib.nullcontext()


def model_factory(options: TorchOptions):
    """A function that builds ``options``' model afresh, every call from the run's seed (every rank, every pipeline
    stage starts from the same weights)."""
    torch = import_torch("--framework torch")
    if options.workload.model == "transformer":
        from rnnprof.models.torch.transformer import TransformerLM as model_class
    else:
        from rnnprof.models.torch.rnnlm import RNNLM as model_class

    def make():
        torch.manual_seed(options.workload.seed)
        return model_class(options)

    return make


class TorchTraining:
    """The model and optimizer of one rank, ready to ``step()``; ``distributed`` means a process group is up (of
    ``options.workload.devices`` ranks, laid out by ``layout``)."""

    def __init__(self, options: TorchOptions, rank: int = 0, device: str = "cpu", distributed: bool = False):
        torch = import_torch("--framework torch")
        from rnnprof.models.torch.rnnlm import lm_data

        config = options.workload
        self.options, self.torch, self.device = options, torch, torch.device(device)
        self.layout: Layout = plan_layout(options)
        # phase(name) -> context manager around "forward" (zero_grad, forward, loss), "backward" (with DDP's
        # all-reduce) and "optimizer" (clipping, update); a capture sets it (TorchCapture.phase). A pipeline marks
        # the forward and the backward of each micro-batch instead (torch_parallel.phased_stage_class).
        self.phase = no_phase
        self.pipeline = None
        self._build(model_factory(options), rank, distributed)
        optimizer = torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD
        self.optimizer = optimizer(self.parameter_list, lr=config.learning_rate)
        data = lm_data(options)
        batch, data_rank = config.per_device_batch(), self.layout.data_rank(rank)
        self._batches = data.batches(batch, data_rank, config.seed)
        self._eval_batches = data.batches(batch, data_rank, config.seed + EVAL_SEED_OFFSET)
        self.steps_run = 0

    def _build(self, make_model, rank: int, distributed: bool) -> None:
        """The model as ``--parallel`` wraps it: DDP (or nothing) here, every other mode by ``torch_parallel``."""
        self.ddp = distributed and self.options.workload.variable_update == "replicated" and \
            self.options.parallel == "ddp"
        if self.options.parallel == "ddp" or not distributed:
            self.model = make_model().to(self.device)
            self.module = torch_parallel.data_parallel(self.model, self.device, self.options) if self.ddp \
                else self.model
            self.parameter_list = list(self.model.parameters())
            self.groups = torch_parallel.mesh_groups(self.layout, None) if distributed else {}
            return
        built = torch_parallel.build(self.options, self.layout, rank, self.device, make_model,
                                     lambda name: self.phase(name))
        self.model, self.module, self.pipeline = built.model, built.module, built.pipeline
        self.parameter_list, self.groups = built.parameters, built.groups

    def _tensors(self, batch):
        torch = self.torch
        return (torch.from_numpy(batch["inputs"].astype(np.int64)).to(self.device),
                torch.from_numpy(batch["targets"].astype(np.int64)).to(self.device),
                int(batch["lengths"].sum()))

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def step(self) -> StepResult:
        """One training step; only forward, backward, clipping and the update are timed."""
        inputs, targets, words = self._tensors(next(self._batches))
        self.model.train()
        self._synchronize()
        start = time.perf_counter()
        if self.pipeline is not None:
            value = self._pipeline_step(inputs, targets)
        else:
            with self.phase("forward"):
                self.optimizer.zero_grad(set_to_none=True)
                loss = self.module(inputs, targets)
            with self.phase("backward"):
                loss.backward()
            with self.phase("optimizer"):
                if self.options.clip_norm is not None:
                    self.torch.nn.utils.clip_grad_norm_(self.parameter_list, self.options.clip_norm)
                self.optimizer.step()
            value = float(loss.item())
        self._synchronize()
        seconds = time.perf_counter() - start
        self.steps_run += 1
        return StepResult(seconds=seconds, words=words, loss=value)

    def _pipeline_step(self, inputs, targets) -> float:
        """The schedule's step (each micro-batch's forward and backward marked by the stages), then the update; the
        loss where this rank holds the last stage (NaN elsewhere)."""
        self.optimizer.zero_grad(set_to_none=True)
        for module in self.pipeline.modules:
            module.train()
        value = self.pipeline.step(inputs, targets)
        with self.phase("optimizer"):
            self.optimizer.step()
        return value

    def evaluation(self) -> "Evaluation":
        return Evaluation(self)

    def parameters(self) -> dict[str, np.ndarray]:
        """Every parameter of the rank's model by name, whole (a sharded or sliced one gathered from its group: every
        rank of the run calls this together); a pipeline rank's: those of its stages."""
        modules = self.pipeline.modules if self.pipeline is not None else [self.model]
        found = {}
        for module in modules:
            for name, p in module.named_parameters():
                whole = p.full_tensor() if hasattr(p, "full_tensor") else p
                found[name] = whole.detach().cpu().numpy().copy()
        return found


class Evaluation:
    """Forward-only steps (no gradients, dropout off) on the training model, for ``--eval``."""

    def __init__(self, training: TorchTraining):
        self.training = training

    def step(self) -> StepResult:
        t = self.training
        inputs, targets, words = t._tensors(next(t._eval_batches))
        t.model.eval()
        try:
            with t.torch.no_grad():
                t._synchronize()
                start = time.perf_counter()
                value = float(t.model(inputs, targets).item())
                t._synchronize()
                seconds = time.perf_counter() - start
        finally:
            t.model.train()
        return StepResult(seconds=seconds, words=words, loss=value)

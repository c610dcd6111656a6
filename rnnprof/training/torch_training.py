"""One process's share of a PyTorch data-parallel run: the RNNLM, its optimizer and a timed ``step()``.

In a multi-process run every rank builds one ``TorchTraining`` (``rnnprof.training.torch_ddp``);
with ``replicated`` the model is wrapped in ``DistributedDataParallel``, so ``backward()`` all-reduces
the gradients and every rank applies the same averaged update. ``independent`` exchanges nothing.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from rnnprof.models.config import TorchOptions
from rnnprof.frameworks.torch import import_torch
from rnnprof.training.measure import StepResult

EVAL_SEED_OFFSET = 7919  # evaluation batches come from their own stream


def no_phase(name: str):
    """The default ``TorchTraining.phase``: no range."""
    return contextlib.nullcontext()


class TorchTraining:
    """The model and optimizer of one rank, ready to ``step()``; ``distributed`` means a process group is up."""

    def __init__(self, options: TorchOptions, rank: int = 0, device: str = "cpu", distributed: bool = False):
        torch = import_torch("--framework torch")
        from rnnprof.models.torch.rnnlm import RNNLM, lm_data

        config = options.workload
        self.options = options
        self.torch = torch
        self.device = torch.device(device)
        torch.manual_seed(config.seed)  # every rank starts from the same weights
        self.model = RNNLM(options).to(self.device)
        self.ddp = distributed and config.variable_update == "replicated"
        if self.ddp:
            from torch.nn.parallel import DistributedDataParallel

            self.module = DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                bucket_cap_mb=options.bucket_cap_mb)
        else:
            self.module = self.model
        if config.optimizer == "adam":
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.learning_rate)
        else:
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.learning_rate)
        data = lm_data(options)
        batch = config.per_device_batch()
        self._batches = data.batches(batch, rank, config.seed)
        self._eval_batches = data.batches(batch, rank, config.seed + EVAL_SEED_OFFSET)
        self.steps_run = 0
        # phase(name) -> context manager around "forward" (zero_grad, forward, loss), "backward" (with DDP's
        # all-reduce) and "optimizer" (clipping, update); a capture sets it (TorchCapture.phase)
        self.phase = no_phase

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
        self.module.train()
        self._synchronize()
        start = time.perf_counter()
        with self.phase("forward"):
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.module(inputs, targets)
        with self.phase("backward"):
            loss.backward()
        with self.phase("optimizer"):
            if self.options.clip_norm is not None:
                self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options.clip_norm)
            self.optimizer.step()
        value = float(loss.item())
        self._synchronize()
        seconds = time.perf_counter() - start
        self.steps_run += 1
        return StepResult(seconds=seconds, words=words, loss=value)

    def evaluation(self) -> "Evaluation":
        return Evaluation(self)

    def parameters(self) -> dict[str, np.ndarray]:
        return {name: p.detach().cpu().numpy().copy() for name, p in self.model.named_parameters()}


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

"""``rnnprof count-ops``' result: graph operators and kernel invocations per device and step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rnnprof.analyzers.opcount import OpCountComparison, OpCountReport
from rnnprof.reports import charts
from rnnprof.reports.html import Page
from rnnprof.reports.opcount import comparison_document, to_document
from rnnprof.reports.results.base import Result


@dataclass(frozen=True, repr=False)
class CountOpsResult(Result):
    """``report``: the counts of the input; ``comparison``: against ``--vs``'s input (None without it);
    ``left_out``: the events the loaders left out, by reason."""

    report: OpCountReport
    left_out: dict
    comparison: OpCountComparison | None = None

    COMMAND: ClassVar[str] = "count-ops"

    def document(self) -> dict:
        if self.comparison is not None:
            return {**comparison_document(self.comparison), "left_out": self.left_out}
        return {**to_document(self.report), "left_out": self.left_out}

    def tables(self) -> dict[str, list[dict]]:
        """``kernels`` (per device: CPU and GPU kernels, GPU launches, copies, in all and per step), ``by_type``
        (kernels per op type) and ``graph_ops`` (each graph's ops per device)."""
        k = self.report.kernels
        kernels = [{"device": d.device, "cpu_kernels": d.cpu_kernels, "gpu_kernels": d.gpu_kernels,
                    "gpu_launches": d.gpu_launches, "copies": d.copies,
                    "cpu_kernels_per_step": k.per_step(d.cpu_kernels),
                    "gpu_kernels_per_step": k.per_step(d.gpu_kernels), "outside_steps": d.outside_steps}
                   for d in k.devices] if k.available else []
        by_type = [{"op_type": op, "cpu_kernels": c, "gpu_kernels": g} for op, (c, g) in k.by_type.items()]
        graphs = [{"graph": name, "device": device or "", "ops": n}
                  for name, graph in (("user", self.report.user_graph), ("runtime", self.report.runtime_graph))
                  if graph.available for device, n in graph.by_device.items()]
        return {"kernels": kernels, "by_type": by_type, "graph_ops": graphs}

    def html(self, page: Page) -> None:
        k = self.report.kernels
        if k.available:
            page.table(["device", "CPU kernels", "GPU kernels", "GPU launches", "copies"],
                       [[d.device, f"{k.per_step(d.cpu_kernels):,.1f}", f"{k.per_step(d.gpu_kernels):,.1f}",
                         f"{k.per_step(d.gpu_launches):,.1f}", f"{k.per_step(d.copies):,.1f}"] for d in k.devices],
                       numeric={1, 2, 3, 4}, caption=f"per step over {k.n_steps} step(s)")
        else:
            page.paragraph(f"Kernels: {k.reason}", "sub")
        if k.available or self.report.runtime_graph.available or self.report.user_graph.available:
            page.chart("opcount", charts.spec(charts.opcount_chart(self.report)))

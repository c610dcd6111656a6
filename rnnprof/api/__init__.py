"""rnnprof's Python API: ``rnnprof.open(path)`` gives a ``Run`` whose methods are the commands' analyses, each
returning the result the command renders (``to_json()``, ``to_frames()``, and an HTML view for notebooks)."""

from rnnprof.api.run import Run, open
from rnnprof.reports.results.audit import AuditFindings
from rnnprof.reports.results.base import Result
from rnnprof.reports.results.comm import CommResult
from rnnprof.reports.results.count_ops import CountOpsResult
from rnnprof.reports.results.critical_path import CriticalPathResult
from rnnprof.reports.results.diff import DiffResult
from rnnprof.reports.results.hang import HangResult
from rnnprof.reports.results.memory import MemoryResult
from rnnprof.reports.results.roofline import RooflineResult
from rnnprof.reports.results.whatif import WhatIfResult

__all__ = ["open", "Run", "Result", "AuditFindings", "CommResult", "CountOpsResult", "CriticalPathResult",
           "DiffResult", "HangResult", "MemoryResult", "RooflineResult", "WhatIfResult"]

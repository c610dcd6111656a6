"""Why a job hung: which rank, in which collective, at which line of its code (docs/commands/hang.md).

Input: each rank's flight-recorder entries (``RankRecorder``) and its threads' stacks (``RankStacks``), parsed
by ``rnnprof.traces.flight_recorder`` and ``rnnprof.traces.stack_dump``. No I/O here."""

from .cluster import analyze_cluster_hang, analyze_remote_cluster_hang, serving
from .analysis import analyze_hang, own_frame, slow_verdict, still_moving
from .process import analyze_process_hang
from .model import RecordedCollective, Frame, RankRecorder, RankStacks, ThreadStack
from .verdict import DESYNC, KINDS, MISMATCH, NEVER_ARRIVED, SLOW, STUCK, Culprit, HangVerdict, RankState, Waiter

__all__ = ["RecordedCollective", "Culprit", "DESYNC", "Frame", "HangVerdict", "KINDS", "MISMATCH", "NEVER_ARRIVED",
           "RankRecorder", "RankStacks", "RankState", "SLOW", "STUCK", "ThreadStack", "Waiter", "analyze_cluster_hang",
           "analyze_hang", "analyze_process_hang", "analyze_remote_cluster_hang", "own_frame", "serving", "slow_verdict",
           "still_moving"]

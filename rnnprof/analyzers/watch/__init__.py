"""The watch's analyses of a job's step series (``rnnprof watch``): the rules judging each rank against its own
rolling baseline and jitter (``rules``), the detector raising anomalies as the steps come and giving the live
view (``detector``), a capture window's verdict (``verdict``) and the whole series summed up for the report
(``summary``). Pure: the series are ``events.series.RankSeries``."""

from .detector import Detector
from .result import (BASELINE, CAUSE_ORDER, INPUT_STALL, KINDS, MEMORY_GROWTH, REGRESSION, REQUESTED, SPIKE,
                     STRAGGLER, Anomaly, FindingSummary, JobView, RankView, WindowVerdict, by_cause)

__all__ = ["Detector", "Anomaly", "JobView", "RankView", "WindowVerdict", "FindingSummary", "by_cause", "KINDS",
           "CAUSE_ORDER", "REGRESSION", "STRAGGLER", "INPUT_STALL", "MEMORY_GROWTH", "SPIKE", "REQUESTED",
           "BASELINE"]

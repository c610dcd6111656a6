"""What-ifs (estimates): the path's longest events, each with what the step would save were it to take no time
(the longest path passed again with that event weighing nothing, every wait kept)."""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.critical_path.links import PathEvents
from rnnprof.analyzers.critical_path.path import LongestPath
from rnnprof.analyzers.critical_path.result import WhatIf
from rnnprof.events import EventTable


def what_ifs(table: EventTable, longest: LongestPath, ev: PathEvents, what_if_ops: int) -> tuple[WhatIf, ...]:
    """The path's ``what_if_ops`` longest events, each with the path's saving were it to take no time."""
    labels = [d.label for d in table.devices]
    what_if = []
    for k in np.argsort(-ev.dur, kind="stable")[:what_if_ops].tolist():
        if ev.dur[k] <= 0:
            continue
        row = int(ev.rows[k])
        what_if.append(WhatIf(name=table.strings[table.name[row]], device=labels[table.device[row]],
                              dur_us=float(ev.dur[k]),
                              saving_us=max(0.0, float(longest.length - longest.without(int(ev.nodes[k]))))))
    what_if.sort(key=lambda x: -x.saving_us)
    return tuple(what_if)


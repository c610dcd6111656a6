"""PA006: too few inter-op threads for the number of devices.

Each device's executor schedules its ops on the shared inter-op pool; with fewer
threads than devices, towers take turns instead of running side by side (and TF
can stall outright). The study recommends more inter-op threads than devices. 0
means TF's default: one thread per core.
"""

from __future__ import annotations

from .finding import NotChecked, PlacementFinding, Severity
from .inputs import AuditInput

RULE_ID = "PA006-inter-op-threads"
TITLE = "Too few inter-op threads"
_CORE_KEYS = ("cpu_count", "cores", "logical_cpus")


def host_cores(manifest: dict) -> int | None:
    for section in (manifest.get("host"), manifest.get("machine"), manifest):
        if not isinstance(section, dict):
            continue
        for key in _CORE_KEYS:
            if isinstance(section.get(key), int) and section[key] > 0:
                return section[key]
    return None


def device_count(inp: AuditInput) -> int | None:
    if isinstance(inp.config.get("devices"), int) and not isinstance(inp.config["devices"], bool):
        return inp.config["devices"]
    devices = (inp.manifest or {}).get("devices")
    if isinstance(devices, list) and devices:
        return len([d for d in devices if not isinstance(d, dict) or d.get("kind", "") != "host"])
    return None


def check(inp: AuditInput) -> list[PlacementFinding] | NotChecked:
    if inp.manifest is None:
        return NotChecked(RULE_ID, "needs a run manifest (session_config); graphs and traces do not record "
                                   "the thread pool sizes")
    threads = inp.session_config.get("inter_op_threads")
    if threads is None:
        threads = inp.config.get("inter_op_threads")
    devices = device_count(inp)
    if threads is None or devices is None:
        return NotChecked(RULE_ID, "the manifest records no inter_op_threads or device count")
    cores = host_cores(inp.manifest)
    if threads == 0:
        if cores is None:
            return NotChecked(RULE_ID, "inter_op_threads is 0 (TF's default: one per core) and the manifest "
                                       "does not record the core count")
        effective, how = cores, f"0, TF's default of one per core = {cores}"
    else:
        effective, how = threads, str(threads)
    if devices < 2 or effective > devices:
        return []
    severity = Severity.ERROR if effective < devices else Severity.WARNING
    relation = "fewer than" if effective < devices else "only as many as"
    return [PlacementFinding(
        rule_id=RULE_ID,
        severity=severity,
        title=f"inter-op threads ({how}) {relation} the {devices} devices",
        devices=(),
        evidence={"inter_op_threads": threads, "effective_threads": effective, "devices": devices,
                  "cores": cores},
        cost_us_per_step=None,
        cost_basis="not estimable from one run: towers take turns on the pool; compare with "
                   "`rnnprof scale --inter-op-threads N`",
        fix=(f"Set inter_op_parallelism_threads (--inter-op-threads) to more than {devices}, e.g. "
             f"{max(devices + 1, 2 * devices)}, so each device's executor has a thread while the others run."),
    )]

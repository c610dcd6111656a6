"""Configuration, A against B: what each side records about how it ran (a run's manifest; a trace's distributed
settings, GPU model, format and devices), flattened to ``key -> text``."""

from __future__ import annotations

from rnnprof.analyzers.diff.result import ConfigChange, ConfigSection, Side

# Manifest fields that say what was run and where; the rest (paths, times, results) differ on every run.
_MANIFEST_FIELDS = ("config", "session_config", "versions", "machine", "host", "devices")



def _flatten(value, prefix: str, out: dict[str, str]) -> None:
    """Nested settings as ``a.b.c -> text``; a list of named entries (the manifest's devices) by their names."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}", out)
    elif isinstance(value, list):
        out[prefix] = ", ".join(str(v.get("name", v)) if isinstance(v, dict) else str(v) for v in value)
    else:
        out[prefix] = value if isinstance(value, str) else repr(value)



def settings(side: Side) -> dict[str, str]:
    """What a side records about how it ran, flattened to ``key -> text``."""
    out: dict[str, str] = {}
    if side.manifest is not None:
        recorded = side.manifest.as_dict()
        for key in _MANIFEST_FIELDS:
            if key in recorded:
                _flatten(recorded[key], key, out)
    if side.events is not None:
        distributed = side.events.metadata.distributed
        for key in ("world_size", "backend"):
            values = sorted({str(d[key]) for d in distributed if key in d})
            if values:
                out[f"distributed.{key}"] = ", ".join(values)
        ranks = {d["rank"] if isinstance(d["rank"], int) else str(d["rank"]) for d in distributed if "rank" in d}
        if ranks:  # the rank id of each rank the side holds (Kineto's distributedInfo.rank)
            out["distributed.rank"] = ", ".join(
                str(r) for r in sorted(ranks, key=lambda r: (0, r, "") if isinstance(r, int) else (1, 0, str(r))))
        models = sorted({str(g["name"]) for g in side.events.metadata.devices_properties if "name" in g})
        if models:
            out["gpu model"] = ", ".join(models)
        out["trace format"] = side.events.source_format
        out["trace devices"] = ", ".join(d.label for d in sorted(side.events.devices))
    return out



def diff_config(a: Side, b: Side) -> ConfigSection:
    sa, sb = settings(a), settings(b)
    if not sa and not sb:
        return ConfigSection(available=False, reason="neither side records its configuration")
    changes = tuple(ConfigChange(k, sa.get(k), sb.get(k)) for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k))
    return ConfigSection(available=True, changes=changes, compared=len(set(sa) | set(sb)))


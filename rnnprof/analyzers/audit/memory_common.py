"""What the memory rules (PF008-PF010) share: the device's memory size where the trace records it, and the
evidence every memory finding carries: the bytes a fix frees at the peak and the headroom that leaves."""

from __future__ import annotations

from rnnprof.analyzers.memory import DeviceMemory
from rnnprof.events import TableMetadata

from .finding import Severity

ERROR_SHARE = 0.25  # a finding freeing this share of the device's peak (or of its size, where known) is an error


def device_size(metadata: TableMetadata, device: DeviceMemory) -> int | None:
    """The GPU's memory size from Kineto's ``deviceProperties`` (``totalGlobalMem`` of the entry with its id);
    None for a CPU or where the trace does not record it."""
    label = device.device.rsplit("/", 1)[-1]
    if not label.startswith("gpu:"):
        return None
    index = int(label.split(":")[1])
    for entry in metadata.devices_properties:
        size = entry.get("totalGlobalMem")
        if entry.get("id") == index and isinstance(size, int) and size > 0:
            return size
    return None


def evidence(metadata: TableMetadata, device: DeviceMemory, freed: int) -> dict:
    """``freed_at_peak_bytes``; with the device's size known, the headroom at the peak (size less the reserved
    bytes, else less the allocated ones) now and after the fix; otherwise None and why."""
    size = device_size(metadata, device)
    held = device.peak.reserved if device.peak.reserved is not None else device.peak.allocated
    headroom = None if size is None else size - held
    return {"device": device.device, "peak_bytes": device.peak.allocated, "freed_at_peak_bytes": int(freed),
            "device_bytes": size, "headroom_bytes": headroom,
            "headroom_after_bytes": None if headroom is None else headroom + int(freed),
            "headroom_unknown": "" if size is not None else "the trace records no memory size for this device"}


def basis(facts: dict) -> str:
    """The finding's saving in words: bytes at the peak, not time, and the headroom before and after."""
    text = f"bytes, not time: frees {megabytes(facts['freed_at_peak_bytes'])} at the device's peak"
    if facts["headroom_bytes"] is None:
        return f"{text}; headroom unknown ({facts['headroom_unknown']})"
    return (f"{text}; headroom at the peak {megabytes(facts['headroom_bytes'])}, after the fix "
            f"{megabytes(facts['headroom_after_bytes'])}")


def memory_severity(device: DeviceMemory, freed: int, size: int | None) -> Severity:
    """Warning; error where the bytes freed are at least ERROR_SHARE of the device's size (else its peak)."""
    whole = size if size else device.peak.allocated
    return Severity.ERROR if whole and freed >= ERROR_SHARE * whole else Severity.WARNING


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.2f} MB"

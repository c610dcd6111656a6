"""How the reports write times and sizes: milliseconds from microseconds (three decimals, or about four
significant digits where columns must stay narrow) and megabytes."""

from __future__ import annotations

US_PER_MS = 1000.0


def fmt_ms(us: float | None, signed: bool = False, missing: str = "n/a") -> str:
    """``us`` in milliseconds with three decimals and thousands separators (``signed``: with its sign);
    ``missing`` for None."""
    if us is None:
        return missing
    return f"{us / US_PER_MS:+,.3f}" if signed else f"{us / US_PER_MS:,.3f}"


def fmt_ms_narrow(us: float | None, missing: str = "-") -> str:
    """``us`` in milliseconds with about four significant digits, so that columns stay narrow; ``missing`` for
    None."""
    if us is None:
        return missing
    ms = us / US_PER_MS
    digits = 0 if abs(ms) >= 1000 else 1 if abs(ms) >= 100 else 2 if abs(ms) >= 10 else 3
    return f"{ms:,.{digits}f}"


def fmt_mb(n_bytes: float) -> str:
    """``n_bytes`` in megabytes (10^6 bytes) with two decimals."""
    return f"{n_bytes / 1e6:,.2f}"

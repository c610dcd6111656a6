"""A document as ``json.dumps(document, indent=2)`` writes it, the same text, without its pure-Python encoder,
and piece by piece.

With ``indent``, the standard library encodes value by value in Python (its C encoder has no indent): a
critical path's 200,000 links took 16 s. Here each dict or list is joined at once, its values formatted as
``json`` formats them (the same checks in the same order). ``pieces`` yields the text of each item of the
top-level containers apart, so a large document need never be one string; a ``Lazy`` list builds each of its
items only when it is written.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii
from typing import Callable, Iterable, Iterator

_INF = float("inf")


class Lazy:
    """A list whose items are ``build(x)`` for each ``x`` of ``items``, built as they are written."""

    def __init__(self, items: Iterable, build: Callable):
        self.items, self.build = items, build

    def __iter__(self):
        return (self.build(x) for x in self.items)


_SPECIAL = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _float(value: float) -> str:
    text = float.__repr__(value)
    return _SPECIAL.get(text, text)


# The plain types by their exact class (a subclass goes through ``_scalar``'s checks, as ``json`` makes them).
_FORMAT = {str: encode_basestring_ascii, float: _float, int: int.__repr__, bool: lambda v: "true" if v else "false",
           type(None): lambda v: "null"}


def _scalar(value) -> str | None:
    """The text of a plain value, as ``json`` checks them; None for a container."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, (list, tuple, dict, Lazy)):
        return None
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _key(key) -> str:
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if isinstance(key, float):
        return encode_basestring_ascii(_float(key))
    if key is True or key is False or key is None:
        return {True: '"true"', False: '"false"', None: '"null"'}[key]
    if isinstance(key, int):
        return encode_basestring_ascii(int.__repr__(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def _encode(value, indent: str) -> str:
    form = _FORMAT.get(value.__class__)
    if form is not None:
        return form(value)
    text = _scalar(value)
    if text is not None:
        return text
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        parts = []
        for key, item in value.items():
            form = _FORMAT.get(item.__class__)
            parts.append((encode_basestring_ascii(key) if key.__class__ is str else _key(key)) + ": "
                         + (form(item) if form is not None else _encode(item, inner)))
    else:
        parts = [_encode(item, inner) for item in value]
        if not parts:
            return "[]"
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    return opening + "\n" + inner + (",\n" + inner).join(parts) + "\n" + indent + closing


def _pieces(value, indent: str, depth: int) -> Iterator[str]:
    """The text of ``value`` in pieces: each item of its containers apart, ``depth`` levels down."""
    if depth == 0 or _scalar(value) is not None:
        yield _encode(value, indent)
        return
    inner = indent + "  "
    is_dict = isinstance(value, dict)
    opening, closing = ("{", "}") if is_dict else ("[", "]")
    first = True
    for key, item in value.items() if is_dict else ((None, item) for item in value):
        yield (opening + "\n" if first else ",\n") + inner + (_key(key) + ": " if is_dict else "")
        yield from _pieces(item, inner, depth - 1)
        first = False
    yield opening + closing if first else "\n" + indent + closing


def pieces(document, depth: int = 2) -> Iterator[str]:
    """``json.dumps(document, indent=2)`` in pieces (joined, the same text)."""
    return _pieces(document, "", depth)


def dumps(document) -> str:
    """``json.dumps(document, indent=2)``."""
    return _encode(document, "")

"""Just enough of the protobuf wire format to recognise a message from its first bytes.

A serialized message is a sequence of fields, each a key (``field number << 3 | wire type``, a varint)
and a value: a varint, 8 or 4 fixed bytes, or a length-delimited run of bytes (strings, bytes and
nested messages). Sniffers walk the fields of a file's first bytes (and of nested messages inside
them) without building any message: a field cut off by the end of the prefix ends the walk, and a
length-delimited field cut off that way is still returned with the bytes that are there.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


class Field(NamedTuple):
    number: int
    wire_type: int
    value: int | bytes  # the integer of a varint, else the bytes (possibly cut short by the prefix)


def varint(buf: bytes, pos: int) -> tuple[int, int] | None:
    """(value, position after it), or None when ``buf`` ends inside the varint or it is overlong."""
    value = shift = 0
    for k in range(_MAX_VARINT_BYTES):
        if pos + k >= len(buf):
            return None
        byte = buf[pos + k]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + k + 1
        shift += 7
    return None


def fields(buf: bytes) -> Iterator[Field]:
    """The fields of a (prefix of a) serialized message, in order; stops at the first one that is malformed
    (field number 0, an unknown or group wire type) or cut off, yielding a cut-off length-delimited value as far
    as it goes."""
    pos = 0
    while pos < len(buf):
        key = varint(buf, pos)
        if key is None:
            return
        tag, pos = key
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            return
        if wire_type == VARINT:
            value = varint(buf, pos)
            if value is None:
                return
            yield Field(number, wire_type, value[0])
            pos = value[1]
        elif wire_type in (I64, I32):
            size = 8 if wire_type == I64 else 4
            if pos + size > len(buf):
                return
            yield Field(number, wire_type, buf[pos:pos + size])
            pos += size
        elif wire_type == LEN:
            length = varint(buf, pos)
            if length is None:
                return
            start = length[1]
            yield Field(number, wire_type, buf[start:start + length[0]])
            pos = start + length[0]
        else:
            return  # groups (3, 4) appear in none of the formats read here; 6 and 7 are invalid


def first(buf: bytes, number: int, wire_type: int = LEN) -> int | bytes | None:
    """The value of the first field ``number`` (of ``wire_type``) among the fields ``buf`` shows, else None."""
    for f in fields(buf):
        if f.number == number and f.wire_type == wire_type:
            return f.value
    return None


def only(buf: bytes, allowed: dict[int, int]) -> bool:
    """Whether every field that ``buf`` shows is one of ``allowed`` (field number -> wire type), and there is one."""
    seen = False
    for f in fields(buf):
        if allowed.get(f.number) != f.wire_type:
            return False
        seen = True
    return seen

"""Reads the GCS's protobuf values (core/proto/phalanx.proto) field by field, without the protobuf
package: the wire format's varints, length-delimited and fixed-size fields are all a reader of these
tables needs. A value that is not well-formed raises ValueError naming where it broke."""
import struct

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


def _varint(data, pos):
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError(f"protobuf varint runs past the end of a {len(data)}-byte value")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError(f"protobuf varint longer than 10 bytes at offset {pos}")


def fields(data):
    """{field number: [values in order]}: varints as int, length-delimited fields as bytes,
    fixed64 and fixed32 fields as their raw bytes (double() reads a fixed64 double)."""
    out = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, kind = key >> 3, key & 7
        if kind == VARINT:
            value, pos = _varint(data, pos)
        elif kind == LENGTH:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
            if len(value) != size:
                raise ValueError(f"protobuf field {number} claims {size} bytes past the end of the value")
        elif kind in (FIXED64, FIXED32):
            size = 8 if kind == FIXED64 else 4
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"protobuf wire type {kind} (field {number}) is not one these tables use")
        out.setdefault(number, []).append(value)
    return out


def one(f, number, default=None):
    """The last value of field `number` (protobuf's rule for a repeated scalar), or `default`."""
    values = f.get(number)
    return values[-1] if values else default


def text(f, number):
    return one(f, number, b"").decode("utf-8", "replace")


def double(raw):
    return struct.unpack("<d", raw)[0] if raw else 0.0


def string_double_map(f, number):
    """A map<string, double> field as a dict (each entry: key = 1, value = 2)."""
    out = {}
    for entry in f.get(number, []):
        e = fields(entry)
        out[text(e, 1)] = double(one(e, 2, b""))
    return out

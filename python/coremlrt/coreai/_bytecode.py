"""Reads the dialect table of an MLIR bytecode file (``main.mlirb``) without MLIR.

Only what the version check needs: the file's bytecode version, its producer string and, per
dialect, the version bytes the dialect wrote. The layout (prefix varints, sections, the string
and dialect sections) is MLIR's documented bytecode format; docs/design/coreai.md says what
an ``.aimodel`` holds there.
"""

from .._core import Error

_MAGIC = b"ML\xefR"
_SECTION_STRING = 0
_SECTION_DIALECT = 1
_SECTION_DIALECT_VERSIONS = 7


def _varint(data, at, where):
    if at >= len(data):
        raise Error(f"{where}: truncated MLIR bytecode")
    first = data[at]
    if first == 0:
        if at + 9 > len(data):
            raise Error(f"{where}: truncated MLIR bytecode")
        return int.from_bytes(data[at + 1:at + 9], "little"), at + 9
    count = (first & -first).bit_length()  # one more than the trailing zero bits
    if at + count > len(data):
        raise Error(f"{where}: truncated MLIR bytecode")
    return int.from_bytes(data[at:at + count], "little") >> count, at + count


def _sections(data, where):
    if data[:4] != _MAGIC:
        raise Error(f"{where}: not MLIR bytecode (no 'ML\\xefR' magic)")
    version, at = _varint(data, 4, where)
    end = data.find(b"\0", at)
    if end < 0:
        raise Error(f"{where}: truncated MLIR bytecode")
    producer = data[at:end].decode("utf-8", "replace")
    at = end + 1
    sections = {}
    while at < len(data):
        id_and_aligned = data[at]
        length, at = _varint(data, at + 1, where)
        if id_and_aligned & 0x80:
            _, at = _varint(data, at, where)
            while at < len(data) and data[at] == 0xCB:  # alignment padding
                at += 1
        if at + length > len(data):
            raise Error(f"{where}: MLIR bytecode section runs past the end of the file")
        sections[id_and_aligned & 0x7F] = data[at:at + length]
        at += length
    return version, producer, sections


def _strings(section, where):
    count, at = _varint(section, 0, where)
    sizes = []
    for _ in range(count):
        size, at = _varint(section, at, where)
        sizes.append(size)
    # Sizes are stored last string first; the string data (NUL-terminated) ends the section.
    strings = [""] * count
    end = len(section)
    for index, size in zip(reversed(range(count)), sizes):
        strings[index] = section[end - size:end - 1].decode("utf-8", "replace")
        end -= size
    return strings


def dialect_versions(data, where="main.mlirb"):
    """Returns (bytecode version, producer, {dialect name: version bytes or None})."""
    version, producer, sections = _sections(bytes(data), where)
    if _SECTION_STRING not in sections or _SECTION_DIALECT not in sections:
        raise Error(f"{where}: MLIR bytecode without a string or dialect section")
    strings = _strings(sections[_SECTION_STRING], where)
    section = sections[_SECTION_DIALECT]
    count, at = _varint(section, 0, where)
    dialects = {}
    for _ in range(count):
        value, at = _varint(section, at, where)
        index, has_version = value >> 1, value & 1
        if index >= len(strings):
            raise Error(f"{where}: dialect name index {index} out of range")
        blob = None
        if has_version:
            section_id = section[at]
            length, at = _varint(section, at + 1, where)
            if section_id & 0x7F != _SECTION_DIALECT_VERSIONS:
                raise Error(f"{where}: unexpected section {section_id} for a dialect version")
            blob = bytes(section[at:at + length])
            at += length
        dialects[strings[index]] = blob
    return version, producer, dialects

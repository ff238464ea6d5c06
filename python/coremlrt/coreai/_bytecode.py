"""Reads an MLIR bytecode file (``main.mlirb``) without MLIR: its dialect table and where its
resource blobs lie.

What the version check needs (the file's bytecode version, its producer string and, per
dialect, the version bytes the dialect wrote), and the file offset of each resource blob, so
that the translation maps the weights inside the file instead of copying them. The layout
(prefix varints, sections, the string, dialect, resource and resource offset sections) is
MLIR's documented bytecode format; docs/design/coreai.md says what an ``.aimodel`` holds there.
"""

from .._core import BadModelError

_MAGIC = b"ML\xefR"
_SECTION_STRING = 0
_SECTION_DIALECT = 1
_SECTION_RESOURCE = 5
_SECTION_RESOURCE_OFFSET = 6
_SECTION_DIALECT_VERSIONS = 7
_RESOURCE_BLOB = 0  # the kind byte of a blob entry in the resource offset section


def _varint(data, at, where):
    if at >= len(data):
        raise BadModelError(f"{where}: truncated MLIR bytecode")
    first = data[at]
    if first == 0:
        if at + 9 > len(data):
            raise BadModelError(f"{where}: truncated MLIR bytecode")
        return int.from_bytes(data[at + 1:at + 9], "little"), at + 9
    count = (first & -first).bit_length()  # one more than the trailing zero bits
    if at + count > len(data):
        raise BadModelError(f"{where}: truncated MLIR bytecode")
    return int.from_bytes(data[at:at + count], "little") >> count, at + count


def _section_spans(data, where):
    """{section id: (offset of its data in the file, length)}."""
    if data[:4] != _MAGIC:
        raise BadModelError(f"{where}: not MLIR bytecode (no 'ML\\xefR' magic)")
    version, at = _varint(data, 4, where)
    end = data.find(b"\0", at)
    if end < 0:
        raise BadModelError(f"{where}: truncated MLIR bytecode")
    producer = data[at:end].decode("utf-8", "replace")
    at = end + 1
    spans = {}
    while at < len(data):
        id_and_aligned = data[at]
        length, at = _varint(data, at + 1, where)
        if id_and_aligned & 0x80:
            alignment, at = _varint(data, at, where)
            if alignment < 1 or alignment & (alignment - 1):
                raise BadModelError(f"{where}: MLIR bytecode section alignment {alignment} is not a power of two")
            at += -at % alignment  # the padding (0xCB bytes) up to the section's alignment
        if at + length > len(data):
            raise BadModelError(f"{where}: MLIR bytecode section runs past the end of the file")
        spans[id_and_aligned & 0x7F] = (at, length)
        at += length
    return version, producer, spans


def _sections(data, where):
    version, producer, spans = _section_spans(data, where)
    return version, producer, {key: data[at:at + length] for key, (at, length) in spans.items()}


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
        raise BadModelError(f"{where}: MLIR bytecode without a string or dialect section")
    strings = _strings(sections[_SECTION_STRING], where)
    section = sections[_SECTION_DIALECT]
    count, at = _varint(section, 0, where)
    dialects = {}
    for _ in range(count):
        value, at = _varint(section, at, where)
        index, has_version = value >> 1, value & 1
        if index >= len(strings):
            raise BadModelError(f"{where}: dialect name index {index} out of range")
        blob = None
        if has_version:
            section_id = section[at]
            length, at = _varint(section, at + 1, where)
            if section_id & 0x7F != _SECTION_DIALECT_VERSIONS:
                raise BadModelError(f"{where}: unexpected section {section_id} for a dialect version")
            blob = bytes(section[at:at + length])
            at += length
        dialects[strings[index]] = blob
    return version, producer, dialects


def resource_blobs(data, where="main.mlirb"):
    """{resource key: (offset of its data in the file, size in bytes)} for every blob resource.

    The resource offset section lists each group's resources in the order the resource
    section holds them, each with its entry's size there; a blob entry is its alignment and
    data size (varints), padding up to that alignment (counted from the file's start, the
    resource section being aligned), then the data.
    """
    data = data if isinstance(data, bytes) else bytes(data)
    _, _, spans = _section_spans(data, where)
    if _SECTION_RESOURCE_OFFSET not in spans:
        return {}
    if _SECTION_RESOURCE not in spans or _SECTION_STRING not in spans:
        raise BadModelError(f"{where}: MLIR bytecode with resource offsets but no resource or string section")
    at, length = spans[_SECTION_STRING]
    strings = _strings(data[at:at + length], where)
    at, length = spans[_SECTION_RESOURCE_OFFSET]
    offsets = data[at:at + length]
    position, end = spans[_SECTION_RESOURCE][0], sum(spans[_SECTION_RESOURCE])

    def string(index):
        if index >= len(strings):
            raise BadModelError(f"{where}: resource name index {index} out of range")
        return strings[index]

    _, cursor = _varint(offsets, 0, where)  # external resource groups: none of them are blobs here
    blobs = {}
    while cursor < len(offsets):
        _, cursor = _varint(offsets, cursor, where)  # the group's dialect key
        count, cursor = _varint(offsets, cursor, where)
        for _ in range(count):
            key, cursor = _varint(offsets, cursor, where)
            size, cursor = _varint(offsets, cursor, where)
            if cursor >= len(offsets):
                raise BadModelError(f"{where}: truncated MLIR bytecode resource offsets")
            kind = offsets[cursor]
            cursor += 1
            if position + size > end:
                raise BadModelError(f"{where}: resource '{string(key)}' runs past its section")
            if kind == _RESOURCE_BLOB:
                alignment, at = _varint(data, position, where)
                count_bytes, at = _varint(data, at, where)
                if alignment < 1 or alignment & (alignment - 1):
                    raise BadModelError(f"{where}: resource '{string(key)}' alignment {alignment} is not a power "
                                        "of two")
                at += -at % alignment
                if at + count_bytes > position + size:
                    raise BadModelError(f"{where}: resource '{string(key)}' data runs past its entry")
                blobs[string(key)] = (at, count_bytes)
            position += size
    return blobs

#!/usr/bin/env python3
"""Fails when this CPU has AVX-512 (or AVX2) and the C++ tests of that level's kernels skipped.

    ctest --test-dir BUILD --output-junit "$PWD/build/ctest-results.xml"
    python3 scripts/check_simd_tests.py build/ctest-results.xml

The x86 loops that decode packed weights have AVX-512, AVX2 and portable versions, chosen at run
time (src/ops/packed_codes_x86.cc, cpu_level); tests/cpp/ops/packed_weight_test.cc runs each
test at each level and skips (GTEST_SKIP) the levels the CPU or the build lacks. A build that
lost its x86 loops, or a CPU check that stopped finding AVX-512, would turn those tests into
skips and the suite would still pass; this check reads which levels the CPU has (the same
instruction sets cpu_level asks for, from /proc/cpuinfo) and requires that the tests of every
one of them ran. It prints how many tests of each level ran, so the log shows it.

A test's level is the suffix of a parameterized test's name (``/avx512``, ``/avx512_expand``,
``/avx2``, ``/portable``), or, for a test written for one level, the instructions its skip
message says the CPU lacks ("lacks AVX-512").
"""

import collections
import sys
import xml.etree.ElementTree as ET

LEVELS = ("avx512", "avx2", "portable")
# What src/ops/packed_codes_x86.cc (cpu_level) requires of the CPU for each level.
REQUIRED_FLAGS = {
    "avx512": {"avx512f", "avx512bw", "avx512dq", "avx512vl"},
    "avx2": {"avx2", "fma", "f16c"},
    "portable": set(),
}


def cpu_levels(cpuinfo="/proc/cpuinfo"):
    try:
        with open(cpuinfo) as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        flags = set()
    return [level for level in LEVELS if REQUIRED_FLAGS[level] <= flags]


def test_level(name, output):
    suffix = name.rsplit("/", 1)[-1] if "/" in name else ""
    for level in LEVELS:
        if suffix in (level, level + "_expand"):
            return level
    if "lacks AVX-512" in output:
        return "avx512"
    if "lacks AVX2" in output:
        return "avx2"
    return None


def main(path, cpuinfo="/proc/cpuinfo"):
    root = ET.parse(path).getroot()
    ran, skipped = collections.Counter(), collections.defaultdict(list)
    for case in root.iter("testcase"):
        output = "".join(case.findtext(tag) or "" for tag in ("system-out", "system-err"))
        level = test_level(case.get("name", ""), output)
        if level is None:
            continue
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            skipped[level].append(case.get("name"))
        else:
            ran[level] += 1
    have = cpu_levels(cpuinfo)
    problems = []
    for level in LEVELS:
        note = "" if level in have else " (this CPU lacks it)"
        print(f"SIMD kernel tests, {level}: {ran[level]} ran, {len(skipped[level])} skipped{note}")
        if level in have:
            if skipped[level]:
                problems.append(f"this CPU has {level} but {len(skipped[level])} of its tests skipped: "
                                + ", ".join(skipped[level][:5]))
            if not ran[level]:
                problems.append(f"this CPU has {level} but none of its tests ran")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    # An optional second argument reads the CPU's flags from another file than /proc/cpuinfo
    # (tests/python/tools/test_check_simd_tests.py: an AVX-512 CPU).
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(*sys.argv[1:]))

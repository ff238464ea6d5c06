"""Reads LeakSanitizer reports written by Python processes that ran coremlrt's ASan build
(scripts/test_sanitizers.sh, ASAN_OPTIONS=log_path=...) and fails when a leak is ours.

The interpreter itself is not instrumented and does not free everything at exit (interned
strings, module dicts, numpy's caches), so every Python process reports leaks. A leak is ours
when a frame of its allocation stack lies in this repository's C++ code (src/) or in the
extension module (`coremlrt/_core`, which also holds nanobind's runtime): those are the allocations
coremlrt made and never released. Leaks whose every frame is the interpreter's or another
package's are counted and summarised, not failed.

    python3 scripts/lsan_report.py LOG_PREFIX [--show N]
"""

import argparse
import collections
import glob
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
_HEADER = re.compile(r"^(Direct|Indirect) leak of (\d+) byte\(s\) in (\d+) object\(s\) allocated from:")
_FRAME = re.compile(r"^\s+#\d+ 0x[0-9a-f]+ (?:in (\S+) )?(.*)$")


def leaks(text):
    """(kind, bytes, objects, frames) of every leak record in one LSan report."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        match = _HEADER.match(lines[i])
        i += 1
        if not match:
            continue
        frames = []
        while i < len(lines) and _FRAME.match(lines[i]):
            function, where = _FRAME.match(lines[i]).groups()
            frames.append((function or "", where))
            i += 1
        out.append((match.group(1), int(match.group(2)), int(match.group(3)), frames))
    return out


def is_ours(frames):
    for function, where in frames:
        if str(REPO / "src") in where or "coremlrt/_core.cpython" in where or "coremlrt::" in function:
            return True
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log_prefix", help="the log_path given to ASAN_OPTIONS (reports are LOG_PREFIX.PID)")
    parser.add_argument("--show", type=int, default=5, help="print this many of our leaks in full")
    args = parser.parse_args()

    reports = sorted(glob.glob(args.log_prefix + ".*"))
    ours, others = [], collections.Counter()
    sanitizer_errors = []
    for path in reports:
        text = pathlib.Path(path).read_text(errors="replace")
        if "ERROR: AddressSanitizer" in text or "runtime error:" in text:
            sanitizer_errors.append(path)
        for kind, size, count, frames in leaks(text):
            if is_ours(frames):
                ours.append((path, kind, size, count, frames))
            else:
                others[kind] += size
    print(f"LSan: {len(reports)} process reports; leaks of coremlrt: {len(ours)} "
          f"({sum(size for _, _, size, _, _ in ours)} bytes); leaks of the interpreter and other packages: "
          + ", ".join(f"{kind.lower()} {size} bytes" for kind, size in sorted(others.items())))
    for path, kind, size, count, frames in ours[:args.show]:
        print(f"\n{path}: {kind} leak of {size} bytes in {count} objects")
        for function, where in frames[:25]:
            print(f"    {function} {where}")
    for path in sanitizer_errors:
        print(f"{path}: a sanitizer error (not a leak) was reported")
    return 1 if ours or sanitizer_errors else 0


if __name__ == "__main__":
    sys.exit(main())

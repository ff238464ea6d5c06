"""scripts/check_simd_tests.py, the test command's check that the C++ tests of each x86 level
this CPU has ran: on a CPU with AVX-512 (a cpuinfo file standing for one) a run whose AVX-512
tests skipped fails, one where they ran passes; a CPU without AVX-512 may skip them."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "scripts", "check_simd_tests.py")

AVX2_FLAGS = "fpu sse2 avx avx2 fma f16c"
AVX512_FLAGS = AVX2_FLAGS + " avx512f avx512bw avx512dq avx512vl"


def _junit(path, skipped_levels):
    """A ctest JUnit file with one test per level, and one AVX-512 test of its own; the tests
    of `skipped_levels` skipped as GTEST_SKIP reports it."""
    cases = [("Loops/PackedWeightTest.Dense/avx512", "avx512"), ("Loops/PackedWeightTest.Dense/avx512_expand", "avx512"),
             ("Loops/PackedWeightTest.Dense/avx2", "avx2"), ("Loops/PackedWeightTest.Dense/portable", "portable"),
             ("PackedWeight.Fp16GroupTables", "avx512"), ("Other.Unrelated", None)]
    rows = []
    for name, level in cases:
        if level in skipped_levels:
            note = "this CPU or build lacks AVX-512" if name.startswith("PackedWeight.") else "lacks these instructions"
            rows.append(f'<testcase name="{name}" classname="{name}" status="notrun"><skipped message="SKIP"/>'
                        f'<system-out>Skipped: {note}</system-out></testcase>')
        else:
            rows.append(f'<testcase name="{name}" classname="{name}" status="run"><system-out>ok</system-out></testcase>')
    path.write_text('<?xml version="1.0"?><testsuite>' + "".join(rows) + "</testsuite>")
    return str(path)


def _check(tmp_path, flags, skipped_levels):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor : 0\nflags : {flags}\n")
    proc = subprocess.run([sys.executable, SCRIPT, _junit(tmp_path / "ctest.xml", skipped_levels), str(cpuinfo)],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout


def test_an_avx512_cpu_whose_avx512_tests_skipped_fails(tmp_path):
    code, out = _check(tmp_path, AVX512_FLAGS, {"avx512"})
    assert code == 1, out
    assert "this CPU has avx512 but 3 of its tests skipped" in out
    assert "PackedWeight.Fp16GroupTables" in out  # a test written for AVX-512 alone counts too


def test_an_avx512_cpu_whose_tests_all_ran_passes(tmp_path):
    code, out = _check(tmp_path, AVX512_FLAGS, set())
    assert code == 0, out
    # The test written for AVX-512 alone is known by its skip message, so only the
    # parameterized ones count as ran.
    assert "SIMD kernel tests, avx512: 2 ran, 0 skipped" in out


def test_an_avx2_cpu_may_skip_avx512_but_not_avx2(tmp_path):
    code, out = _check(tmp_path, AVX2_FLAGS, {"avx512"})
    assert code == 0, out
    assert "avx512: 0 ran, 3 skipped (this CPU lacks it)" in out and "avx2: 1 ran, 0 skipped" in out
    code, out = _check(tmp_path, AVX2_FLAGS, {"avx512", "avx2"})
    assert code == 1 and "this CPU has avx2 but 1 of its tests skipped" in out, out

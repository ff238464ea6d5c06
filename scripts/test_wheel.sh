#!/usr/bin/env bash
# Proves that the wheel of scripts/build_wheel.sh is self-contained: installs it into a fresh,
# bare virtual environment (numpy and openvino come from the package index as its dependencies)
# and checks that
#   1. every library the installed extension loads, as ldd resolves them, lies in the wheel's
#      coremlrt.libs/, in the openvino wheel's openvino/libs/, or is one of the C and C++
#      runtime libraries every Linux has (glibc's, libstdc++, libgcc_s): none from the system's
#      protobuf or another -dev package, none "not found";
#   2. the quick start predicts in that environment, run from a folder outside the repository
#      (examples/quickstart.py --model: the model is made beforehand with coremltools by the
#      calling environment's python3, so the wheel's environment holds no coremltools), and
#      the OpenVINO backend runs there;
#   3. the same with openvino in another site-packages folder than coremlrt (a venv made with
#      --system-site-packages), and with the system's libprotobuf hidden (a mount namespace:
#      root).
# Any failure exits non-zero. Usage: bash scripts/test_wheel.sh [WHEEL] (default: dist/'s).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
wheel=${1:-$(ls dist/coremlrt-*-manylinux_*.whl 2>/dev/null | tail -1)}
[ -n "$wheel" ] && [ -f "$wheel" ] || { echo "no wheel: run scripts/build_wheel.sh first"; exit 1; }
wheel=$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")

tmp=$(mktemp -d /tmp/coremlrt-test-wheel.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# Nothing of the calling environment reaches the venv's python: no PYTHONPATH, no user site.
clean_env=(env -u PYTHONPATH -u PYTHONHOME PYTHONNOUSERSITE=1)

echo "== the model, made with coremltools by $(command -v python3)"
python3 examples/quickstart.py --save "$tmp/classifier.mlpackage" 2>&1 | tail -1

echo "== a fresh venv with $(basename "$wheel")"
python3 -m venv "$tmp/venv"
py="$tmp/venv/bin/python"
"${clean_env[@]}" "$py" -m pip install -q --disable-pip-version-check "$wheel"
"${clean_env[@]}" "$py" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE "^(coremlrt|numpy|openvino) "
site=$(realpath "$("${clean_env[@]}" "$py" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')")
ext=$(ls "$site"/coremlrt/_core*.so)

echo "== ldd $ext"
ldd "$ext" | tee "$tmp/ldd.txt"
# The runtime libraries of the C and C++ toolchains: present on every glibc system (the
# manylinux policies allow them), never part of a -dev package.
basics="linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libstdc++.so.6 libgcc_s.so.1"
bad=0
while read -r line; do
  [ -n "$line" ] || continue
  name=${line%% *}
  name=${name##*/}
  target=$(printf '%s\n' "$line" | sed -n 's/.*=> \(.*\) (0x[0-9a-f]*)$/\1/p')
  [ -z "$target" ] || target=$(realpath -m "$target")   # ldd prints .../coremlrt/../coremlrt.libs/...
  if [[ $line == *"not found"* ]]; then
    echo "FAIL: $name is not found"; bad=1
  elif [[ -n $target && ( $target == "$site/coremlrt.libs/"* || $target == "$site/openvino/libs/"* ) ]]; then
    :
  elif [[ " $basics " == *" $name "* ]]; then
    :
  else
    echo "FAIL: $name resolves to ${target:-$line}, outside the wheel, the openvino wheel and the C/C++ runtime"; bad=1
  fi
done < "$tmp/ldd.txt"
grep -q "=> $site/coremlrt/../coremlrt.libs/libprotobuf-lite" "$tmp/ldd.txt" || { echo "FAIL: libprotobuf-lite is not the wheel's copy"; bad=1; }
[ "$bad" = 0 ] || exit 1
echo "ldd: every library is the wheel's, the openvino wheel's or the C/C++ runtime's"


echo "== the wheel's environment, from $tmp/run (outside the repository)"
mkdir "$tmp/run"
cp examples/quickstart.py "$tmp/run/"
# check.py: coremlrt is the venv's, and its OpenVINO backend (the openvino wheel's libraries and
# CPU plugin) runs the model's ops and agrees with coremlrt's own kernels.
cat > "$tmp/run/check.py" <<'EOF'
import sys

import numpy as np

import coremlrt

site, path = sys.argv[1:]
assert coremlrt.__file__.startswith(site + "/"), f"coremlrt imported from {coremlrt.__file__}, not {site}"
assert "openvino" in coremlrt.available_backends(), coremlrt.available_backends()
x = {"x": np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)}
openvino = coremlrt.MLModel(path, backend="openvino")
on_openvino = sorted({p["op_type"] for p in openvino.placements() if p["backend"] == "openvino"})
assert "linear" in on_openvino, openvino.placements()
got = openvino.predict(x)["probabilities"]
expected = coremlrt.MLModel(path, backend="reference").predict(x)["probabilities"]
assert np.allclose(got, expected, atol=1e-2), (got, expected)
print("coremlrt", coremlrt.__version__, "from", coremlrt.__file__)
print("backends:", coremlrt.available_backends(), "; ops on openvino:", on_openvino)
EOF
model="$tmp/classifier.mlpackage"
cd "$tmp/run"
"${clean_env[@]}" "$py" check.py "$site" "$model"
"${clean_env[@]}" "$py" quickstart.py --model "$model"
"${clean_env[@]}" "$tmp/venv/bin/coremlrt" info "$model" | grep -E "ops \(|supported"
cd "$repo"

# openvino from another folder of sys.path than coremlrt (a venv made with
# --system-site-packages over the calling environment's openvino): the extension's RPATH misses
# it, and coremlrt loads it from where `import openvino` finds it (python/coremlrt/_openvino_libs.py).
if python3 -c 'import openvino, numpy' 2>/dev/null; then
  echo "== the wheel alone in a venv over $(command -v python3)'s site-packages (openvino, numpy)"
  python3 -m venv --system-site-packages "$tmp/venv-split"
  "${clean_env[@]}" "$tmp/venv-split/bin/python" -m pip install -q --disable-pip-version-check --ignore-installed \
    --no-deps "$wheel"
  split_site=$(realpath "$("${clean_env[@]}" "$tmp/venv-split/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')")
  [ ! -e "$split_site/openvino" ] || { echo "FAIL: openvino is in $split_site"; exit 1; }
  (cd "$tmp/run" && "${clean_env[@]}" "$tmp/venv-split/bin/python" check.py "$split_site" "$model")
else
  echo "== the split install is left out: $(command -v python3) has no openvino or numpy"
fi

# The same runs with every libprotobuf of the system replaced by an empty file: a private mount
# namespace (unshare, as root) bind-mounts /dev/null over each.
system_protobuf=$(ls /usr/lib/*/libprotobuf*.so* /usr/lib/libprotobuf*.so* 2>/dev/null || true)
if [ -z "$system_protobuf" ]; then
  echo "== no system libprotobuf on this machine: nothing to hide"
elif [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; then
  echo "== again with the system's libprotobuf hidden:" $system_protobuf
  hide=""
  for lib in $system_protobuf; do hide+="mount --bind /dev/null '$lib' && [ ! -s '$lib' ]; "; done
  unshare --mount bash -c "set -euo pipefail; $hide
    cd '$tmp/run'
    ${clean_env[*]} '$py' check.py '$site' '$model' | tail -1
    ${clean_env[*]} '$py' quickstart.py --model '$model' | tail -1"
else
  echo "== the run with the system's libprotobuf hidden is left out: no mount namespace here (needs root and unshare)"
fi
echo "wheel test passed: $wheel"

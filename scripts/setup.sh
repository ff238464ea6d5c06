#!/usr/bin/env bash
# Installs what coremlrt needs on Debian 12 (system packages, Python packages), then builds
# coremlrt's self-contained wheel (scripts/build_wheel.sh) and installs it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    g++ cmake ninja-build libprotobuf-dev protobuf-compiler nlohmann-json3-dev libgtest-dev >/dev/null
  # clang 16 with its runtime libraries (libFuzzer, sanitizers) builds the ASan+UBSan tree and
  # the fuzz targets (scripts/asan_tree.sh); Debian 12's default clang 14 lacks _Float16 on x86.
  # llvm-16 brings llvm-symbolizer, which clang's sanitizer reports need to name source lines.
  $SUDO apt-get install -y -qq --no-install-recommends clang-16 libclang-rt-16-dev llvm-16 >/dev/null
fi

# coremltools, torch, torchvision and transformers make the test models the way users make
# them; torch 2.14.1 and torchvision 0.29.1 are the builds this environment provides (another
# version would download gigabytes).
# openvino: the OpenVINO backend's C++ headers and libraries (pyproject.toml pins the release).
# mypy checks the package's type stubs (tests/python/api/test_typing.py); pytest-asyncio runs the
# async cases of coremltools' runtime tests (scripts/coremltools_op_tests.py --suite runtime);
# pytest-xdist runs the Python suite in two processes (scripts/test.sh). nanobind: the Python
# extension of the sanitizer tree (scripts/asan_tree.sh) and of development trees is built
# against it (CMakeLists.txt); the wheel's build has its own (scripts/build_wheel.sh).
python3 -m pip install -q --disable-pip-version-check numpy pytest pytest-xdist mypy pytest-asyncio "coremltools==9.0" "nanobind==3.1.0" \
  "torch==2.14.1" "torchvision==0.29.1" "transformers==5.24.0" "openvino==2026.4.1"
# Batch prediction's optional extras (Parquet, progress bar, Dask, Ray), for tests/python/batch/test_batch.py,
# test_dask.py and test_ray.py.
python3 -m pip install -q --disable-pip-version-check "pyarrow==26.0.1" "tqdm==4.70.1" \
  "dask[array,bag,dataframe]==2026.8.0" "distributed==2026.8.0" "ray[data]==2.60.0"
# coremlrt serve (tests/python/serving): uvicorn (REST) with httptools (its C HTTP parser: about
# half the server's CPU per small request of the pure-Python h11, docs/design/serving.md), grpcio
# (gRPC), protobuf, prometheus_client and uvloop, at the versions the tests ran with; tritonclient
# 2.73 is the tests' Python client.
# protobuf 6.33.6: what coremltools 9.0, onnx and tritonclient share here (7 breaks
# grpcio-reflection 1.78.2). grpcio-reflection is the one module `import ray.serve` lacks
# (coremlrt.ray.serve_deployment); 1.78.2 is built for protobuf 6. Ray Serve's HTTP side runs on
# fastapi 0.115 / starlette 0.46 (ray[serve] itself would pull fastapi >= 0.133 and more).
python3 -m pip install -q --disable-pip-version-check "uvicorn==0.55.0" "httptools==0.9.0" "uvloop==0.23.0" "grpcio==1.85.4" \
  "protobuf==6.33.6" "prometheus_client==0.26.0" "fastapi==0.115.14" "starlette==0.46.2" \
  "tritonclient[http,grpc]==2.73.0" "grpcio-reflection==1.78.2"
# The language-model API's client test (tests/python/llm/test_openai_api.py streams a chat
# completion through the openai client); tokenizers and jinja2 come with transformers.
python3 -m pip install -q --disable-pip-version-check "openai==3.63.0"
# Triton's load generator, perf_analyzer (tests/python/serving/test_protocol.py, benchmarks/bench_serve.py,
# benchmarks/soak_serve.py): unpacked into build/perf_analyzer, nothing installed system-wide.
bash scripts/install_perf_analyzer.sh >/dev/null
# ONNX export (coremlrt.export_onnx, tests/python/export): onnx builds and checks the graphs, ONNX
# Runtime runs the exports in the tests and in scripts/coremltools_op_tests.py --via onnx.
python3 -m pip install -q --disable-pip-version-check "onnx==1.23.2" "onnxruntime==1.32.0"
# The libraries coremltools' classic-model tests convert from (scripts/coremltools_op_tests.py
# --suite sklearn, xgboost, pipeline): scikit-learn 1.5.1 is the newest coremltools 9 supports
# (coremltools/_deps/__init__.py, _SKLEARN_MAX_VERSION); libsvm-official 3.35.0 is the newest
# whose libsvm.svm still exports the C_SVC constants coremltools' converter and tests read
# (3.36 dropped them). xgboost-cpu 2.1.4 (the CPU build) is what the Python suite converts from
# (tests/python/classic/test_classic_models.py); coremltools' XGBoost suite needs numpy 1 and an XGBoost
# that takes numpy-array feature names, so it runs on XGBoost 1.7.6 with numpy 1.26.4 in
# build/xgboost-1.7.6 (scripts/xgboost_tested_env.sh: pip --target, done once, the system's
# packages untouched).
# nncf compresses the OpenVINO models benchmarks/bench_compressed.py compares with (its smoke
# run: tests/python/tools/test_benchmark_smoke.py); installed with the scikit-learn pin it accepts.
python3 -m pip install -q --disable-pip-version-check "scikit-learn==1.5.1" "libsvm-official==3.35.0" \
  "xgboost-cpu==2.1.4" "nncf==3.4.0"
bash scripts/xgboost_tested_env.sh >/dev/null
# Core AI (.aimodel): coreai-core reads main.mlirb for the translation (coremlrt.coreai) and its
# runtime is the reference tests/python/coreai compares with (in a process of its own:
# tests/python/coreai_oracle.py); coreai-torch converts the torch modules those tests make. The
# newest releases the package index serves (pip index versions --pre coreai-core), pinned.
python3 -m pip install -q --disable-pip-version-check "coreai-core==1.0.0b3" "coreai-torch==0.4.3"
# coremlrt itself: the wheel that ships (scripts/build_wheel.sh), so the tests run what users
# install, and the package is built once: the test command's wheel step rebuilds it from the
# same build directory (nothing to recompile) and tests it in a bare environment. The first
# install brings its dependencies; --force-reinstall replaces an installed coremlrt of the same
# version, which pip would otherwise keep.
# Its build tree also builds the C++ suite, which scripts/test.sh runs there (COREMLRT_WHEEL_TESTS).
wheel=$(COREMLRT_WHEEL_TESTS=1 bash scripts/build_wheel.sh | tail -n 1)
python3 -m pip install -q --disable-pip-version-check "$wheel"
python3 -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"

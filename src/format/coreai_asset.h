#pragma once
// Core AI models (.aimodel folders: main.mlirb, main.hash, metadata.json). Their program is
// MLIR bytecode in Apple's own dialect, which only coreai-core's Python bindings read; coremlrt's
// Python package translates it once into a compiled-model folder in its cache
// (python/coremlrt/coreai/__init__.py, docs/design/coreai.md). The C++ loader reads that
// translation: it finds it by the SHA-256 of main.mlirb, as the translator names it.
#include <string>

namespace coremlrt::format {

// Whether `path` is a folder holding a main.mlirb.
bool is_coreai_asset(const std::string& path);

// The compiled-model folder translated from the Core AI model at `path`:
// <cache_dir>/coreai/<sha256 of main.mlirb>-t<translator version>.mlmodelc, the highest
// translator version present. `cache_dir` empty: $COREMLRT_CACHE_DIR, else ~/.cache/coremlrt
// (the Python package's default). Throws Error when main.hash does not match main.mlirb, or when
// no translation is there (saying how to make one).
std::string translated_coreai_model(const std::string& path, const std::string& cache_dir);

}  // namespace coremlrt::format

#pragma once
// Compiled regions cached on disk under a key of our own (backend.cc, compile).
//
// Why not OpenVINO's own cache (ov::cache_dir): its key is computed from the built ov::Model, so
// every load, cached or not, first lowers the region and materialises its constants. For an
// fp16 program computed in fp32 that means widening every weight (resnet18: 11.7 M values, a
// large part of a cached load). Our key is computed from what the region is made of, before
// anything is built: a hit imports the stored blob directly, and resnet18 fp16 loads from the
// cache in about half the time (docs/reports/performance.md, "Measurements behind code choices").
#include <openvino/runtime/compiled_model.hpp>
#include <openvino/runtime/core.hpp>
#include <openvino/runtime/tensor.hpp>

#include <optional>
#include <string>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

// Where the region, compiled with `config` (and `keep_fp16`, RegionBuilder's choice), is cached:
// "<dir>/<key>.blob", the key a 128-bit hash in hex of everything the compiled model depends on:
// this library's build (so changed lowering code never meets an old blob), OpenVINO's version,
// the CPU, the options, and the region's inputs, ops, attributes and constants, bytes included.
// Empty when the region cannot be keyed this way (an op with nested blocks).
std::string region_cache_path(ov::Core& core, const std::string& dir, const Region& region,
                              const ov::AnyMap& config, bool keep_fp16);

struct CachedRegion {
  ov::CompiledModel compiled;
  ov::Tensor blob;  // the memory-mapped file the model was imported from, kept as long as it is
  bool guarded = false;  // the model has the guard output of Lowerer::require (region_kernel.h)
};

// The compiled model stored at `path`, when there is one and its inputs and outputs are exactly
// the region's (plus the guard output); nothing otherwise, and a file that OpenVINO cannot
// import counts as none (a later store replaces it).
std::optional<CachedRegion> import_cached_region(ov::Core& core, const std::string& path, const Region& region,
                                                 const ov::AnyMap& config);

// Writes `compiled` to `path`: to a file beside it, then renamed into place, so that a reader
// never sees half an entry. A cache that cannot be written costs the next load a compile, and
// is not an error of this one.
void store_region(ov::CompiledModel compiled, const std::string& path);

}  // namespace coremlrt::backends::openvino

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
  Tensor mapping;   // our mapping of that file, which `blob` views
  bool guarded = false;  // the model has the guard output of Lowerer::require (region_kernel.h)
};

// The compiled model stored at `path`, when there is one and its inputs and outputs are exactly
// the region's (plus the guard output); nothing otherwise, and a file that OpenVINO cannot
// import counts as none (a later store replaces it).
std::optional<CachedRegion> import_cached_region(ov::Core& core, const std::string& path, const Region& region,
                                                 const ov::AnyMap& config);

// Whether a constant of the region of 1 MiB or more is also read outside it, by an op of the
// function that the region does not hold (a tied embedding: its gather in the region, the output
// projection on our kernels). Such a region is not cached: an imported blob holds its own copy of
// the constant, where a compiled region shares the mapped weights with their other readers
// (docs/reports/performance.md, "Measurements behind code choices"). The
// constexpr ops that make a packed weight are no such readers: they read it at load only.
bool shares_large_constants(const Region& region);

// Drops from this process's memory the pages of the weight file that hold the region's
// constants (format::BlobFile::release_pages): an imported region holds its weights in its own
// blob, and hashing the region's key has just read every byte of them, so a cached load would
// otherwise keep both (docs/reports/performance.md, "Measurements behind code choices").
// Kernels of ours that read the same constants map them again as they read.
void release_constant_pages(const Region& region);
// Drops the pages of the imported file that the import read (the plugin's repacked weights are
// its own; whatever it reads from the file later maps its pages again).
void release_imported_pages(const CachedRegion& cached);

// Writes `compiled` to `path`: to a file beside it, then renamed into place, so that a reader
// never sees half an entry. A cache that cannot be written costs the next load a compile, and
// is not an error of this one.
void store_region(ov::CompiledModel compiled, const std::string& path);

}  // namespace coremlrt::backends::openvino

#include "backends/openvino/compile.h"

#include <openvino/runtime/core.hpp>
#include <openvino/runtime/properties.hpp>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "backends/openvino/region_builder.h"
#include "backends/openvino/region_cache.h"
#include "backends/openvino/region_kernel.h"
#include "format/blob_file.h"

namespace coremlrt::backends::openvino {

namespace {

// A model loaded for fewer threads than the machine has cores shares the machine with other
// work: a Dask worker or Ray actor per core, several serving processes. The CPU plugin pins each
// stream's threads to cores, counting from the first, and processes do not coordinate: two
// one-thread processes both run on core 0 (docs/reports/performance.md, "Measurements behind
// code choices"; benchmarks/bench_batch.py's Dask and Ray paths load their model this way).
// Such a model leaves its threads to the OS scheduler.
bool takes_a_share_of_the_machine(const BackendOptions& options) {
  const long cores = static_cast<long>(std::thread::hardware_concurrency());
  const long wanted = static_cast<long>(options.threads) * std::max(options.concurrent_predictions, 1);
  return options.threads > 0 && cores > 0 && wanted < cores;
}

ov::Core& core() {
  static ov::Core instance;
  return instance;
}

// Where a region's decoded weights may be kept in files (RegionBuilder::decoded_for_plugin): the
// cache folder, else the temporary directory ($TMPDIR or /tmp).
std::string spill_dir(const BackendOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  std::error_code error;
  const std::filesystem::path temporary = std::filesystem::temp_directory_path(error);
  return error ? std::string() : temporary.string();
}

}  // namespace

std::unique_ptr<ops::Kernel> compile_region(const Region& region, const BackendOptions& options) {
  bool fp16_program = false;
  for (const ir::Operation* op : region.ops)
    for (const ir::NamedValue& out : op->outputs) fp16_program = fp16_program || out.type.dtype == DType::Float16;
  // One stream runs one infer request at a time: requests from predictions running together
  // queue on it. With concurrent_predictions > 1 the plugin makes that many streams and splits
  // the threads between them, so side-by-side predictions run without waiting and without
  // synchronising threads inside each op (include/coremlrt/model.h, LoadOptions).
  const bool throughput = options.concurrent_predictions > 1;
  const int streams = throughput ? options.concurrent_predictions : 1;
  try {
    ov::AnyMap config = {
        ov::hint::performance_mode(throughput ? ov::hint::PerformanceMode::THROUGHPUT
                                              : ov::hint::PerformanceMode::LATENCY),
        // docs/design/architecture.md, law 6: fp32 unless the caller opted in to the low-precision mode, and then
        // bf16 only for fp16 programs.
        ov::hint::inference_precision(options.low_precision && fp16_program ? ov::element::bf16 : ov::element::f32),
        // Compressed weights multiply float activations, as Core ML's weight-only compression
        // defines (docs/design/compressed-weights.md). On CPUs with int8 dot products (AVX-512
        // VNNI, AMX) the plugin would otherwise quantize the activations of such matmuls to int8
        // in groups: errors of several percent, in either precision mode.
        ov::hint::dynamic_quantization_group_size(0),
    };
    if (options.threads > 0) config.emplace(ov::inference_num_threads(options.threads));
    if (throughput) config.emplace(ov::num_streams(options.concurrent_predictions));
    if (takes_a_share_of_the_machine(options)) config.emplace(ov::hint::enable_cpu_pinning(false));
    // Our own cache, not ov::cache_dir: a hit skips building the region (region_cache.h).
    const bool shared_constants = shares_large_constants(region);
    const std::string cached_at = options.cache_dir.empty() || shared_constants
                                      ? std::string()
                                      : region_cache_path(core(), options.cache_dir, region, config, options.low_precision);
    if (!cached_at.empty())
      if (std::optional<CachedRegion> cached = import_cached_region(core(), cached_at, region, config)) {
        release_constant_pages(region);
        release_imported_pages(*cached);
        return make_region_kernel(std::move(cached->compiled), region, {cached->mapping}, streams, cached->guarded,
                                  std::move(cached->blob));
      }
    std::vector<Tensor> kept;
    RegionBuilder builder(region, options.low_precision, spill_dir(options), !shared_constants);
    std::shared_ptr<ov::Model> model = builder.build(kept);
    ov::CompiledModel compiled = core().compile_model(model, "CPU", config);
    if (!cached_at.empty()) store_region(compiled, cached_at);
    // The plugin holds its own copies of the weights it repacked; the weight file's pages it read
    // them from need not stay in this process's memory, as after an imported region (a constant
    // the compiled model still reads maps its pages again, from the file, when it reads them).
    if (!shared_constants) release_constant_pages(region);
    for (const Tensor& decoded : builder.spilled()) format::BlobFile::release_pages(decoded.data, decoded.nbytes());
    return make_region_kernel(std::move(compiled), region, std::move(kept), streams, builder.guarded(), {});
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("OpenVINO: ", e.what());
  }
}

}  // namespace coremlrt::backends::openvino

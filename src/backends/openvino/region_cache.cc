#include "backends/openvino/region_cache.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <vector>

#include "backends/openvino/lowering.h"
#include "format/blob_file.h"
#include "ops/thread_pool.h"

namespace coremlrt::backends::openvino {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t mix_word(uint64_t lane, uint64_t word) { return rotl(lane + word * kPrime2, 31) * kPrime1; }
inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  return h ^ (h >> 32);
}

// A 128-bit hash of a sequence of byte strings, for cache keys: not cryptographic (whoever can
// write the cache folder can put any blob there anyway), but every byte counts. Each piece is
// digested on four independent lanes (multiply-rotate rounds over 8-byte words), then folded
// into the running pair with its length, so piece boundaries count too. Large pieces (weights)
// are kept by address and digested together at the end, 1 MiB slices spread over the intra-op
// pool: on one thread, hashing a model's weights was a sizeable part of a cache hit
// (docs/reports/performance.md, "Measurements behind code choices").
class ContentHash {
 public:
  void bytes(const void* data, size_t n) {
    pieces_.push_back({nullptr, n, digest(static_cast<const unsigned char*>(data), n)});
  }
  // The same, for bytes that stay alive and unchanged until hex().
  void stable_bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    if (n < kLarge) {
      bytes(p, n);
    } else {
      pieces_.push_back({p, n, {}});
      for (size_t offset = 0; offset < n; offset += kSlice)
        slices_.push_back({p + offset, std::min(kSlice, n - offset), {}});
    }
  }
  void number(uint64_t value) { bytes(&value, sizeof value); }
  void text(std::string_view s) { bytes(s.data(), s.size()); }

  std::string hex() {
    ops::parallel_for(static_cast<int64_t>(slices_.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        Piece& slice = slices_[static_cast<size_t>(i)];
        slice.digest = digest(slice.data, slice.n);
      }
    });
    uint64_t high = kPrime3, low = kPrime1;
    auto fold = [&](const Digest& d, size_t n) {
      high = avalanche((high ^ d.first) * kPrime1 + n);
      low = avalanche((low + d.second) * kPrime3 ^ rotl(high, 17));
    };
    size_t slice = 0;
    for (const Piece& piece : pieces_) {
      if (!piece.data) {
        fold(piece.digest, piece.n);
        continue;
      }
      for (size_t offset = 0; offset < piece.n; offset += kSlice, ++slice)
        fold(slices_[slice].digest, slices_[slice].n);
    }
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(high),
                  static_cast<unsigned long long>(low));
    return out;
  }

 private:
  static constexpr size_t kLarge = size_t{1} << 16;
  static constexpr size_t kSlice = size_t{1} << 20;
  struct Digest {
    uint64_t first = 0, second = 0;
  };

  static Digest digest(const unsigned char* p, size_t n) {
    uint64_t lane[4] = {kPrime1 + kPrime2, kPrime2, 0, 0 - kPrime1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
      for (int k = 0; k < 4; ++k) {
        uint64_t word;
        std::memcpy(&word, p + i + 8 * k, 8);
        lane[k] = mix_word(lane[k], word);
      }
    for (int k = 0; i + 8 <= n; i += 8, ++k) {  // fewer than 32 bytes remain: k < 4
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      lane[k] = mix_word(lane[k], word);
    }
    uint64_t tail = 0;
    if (n > i) std::memcpy(&tail, p + i, n - i);
    lane[3] = mix_word(lane[3], tail ^ (static_cast<uint64_t>(n - i) << 56));
    return {avalanche(rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18) + n),
            avalanche((lane[0] ^ rotl(lane[1], 29)) * kPrime3 + (lane[2] ^ rotl(lane[3], 43)) * kPrime1 + n * kPrime2)};
  }

  struct Piece {
    const unsigned char* data;  // a large piece, digested by slices in hex(); null: digested
    size_t n;
    Digest digest;
  };

  std::vector<Piece> pieces_;
  std::vector<Piece> slices_;  // of the large pieces, in order
};

// The GNU build ID of the binary this code is linked into (the Python extension, libcoremlrt.so,
// or a program that links the static library): it changes with any change to the code, so a blob
// lowered by another build of coremlrt is never taken for this one's. Without a build ID: the
// binary's path, size and modification time.
std::string this_build() {
  static const std::string build = [] {
    struct Search {
      uintptr_t address;
      std::string id;
    } search{reinterpret_cast<uintptr_t>(&this_build), {}};
    dl_iterate_phdr(
        [](dl_phdr_info* object, size_t, void* data) -> int {
          auto* s = static_cast<Search*>(data);
          bool contains = false;
          for (int i = 0; i < object->dlpi_phnum && !contains; ++i) {
            const ElfW(Phdr)& segment = object->dlpi_phdr[i];
            const uintptr_t start = object->dlpi_addr + segment.p_vaddr;
            contains = segment.p_type == PT_LOAD && s->address >= start && s->address < start + segment.p_memsz;
          }
          if (!contains) return 0;
          for (int i = 0; i < object->dlpi_phnum; ++i) {
            const ElfW(Phdr)& segment = object->dlpi_phdr[i];
            if (segment.p_type != PT_NOTE) continue;
            const auto* note = reinterpret_cast<const unsigned char*>(object->dlpi_addr + segment.p_vaddr);
            const unsigned char* end = note + segment.p_memsz;
            while (note + sizeof(ElfW(Nhdr)) <= end) {
              const auto* header = reinterpret_cast<const ElfW(Nhdr)*>(note);
              const unsigned char* name = note + sizeof(ElfW(Nhdr));
              const unsigned char* desc = name + ((header->n_namesz + 3) & ~3u);
              if (desc + header->n_descsz > end) break;
              if (header->n_type == NT_GNU_BUILD_ID && header->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
                char hex[3];
                for (uint32_t b = 0; b < header->n_descsz; ++b) {
                  std::snprintf(hex, sizeof hex, "%02x", desc[b]);
                  s->id += hex;
                }
                return 1;
              }
              note = desc + ((header->n_descsz + 3) & ~3u);
            }
          }
          return 1;
        },
        &search);
    if (!search.id.empty()) return "build-id " + search.id;
    Dl_info info{};
    struct stat file {};
    if (dladdr(reinterpret_cast<void*>(&this_build), &info) && info.dli_fname && ::stat(info.dli_fname, &file) == 0)
      return std::string("file ") + info.dli_fname + " " + std::to_string(file.st_size) + " " +
             std::to_string(file.st_mtim.tv_sec) + "." + std::to_string(file.st_mtim.tv_nsec);
    return std::string("unknown build");
  }();
  return build;
}

void add_bytes(ContentHash& hash, const Tensor& t) {
  hash.number(t.defined() ? t.nbytes() : 0);
  if (t.defined() && t.data) hash.stable_bytes(t.data, t.nbytes());
}

// A packed constant (src/ir/packed.h): its form and every array as stored.
void add_packed(ContentHash& hash, const ir::PackedTensor& p) {
  hash.number(static_cast<uint64_t>(p.dtype));
  for (const Shape* s : {&p.shape, &p.groups}) {
    hash.number(s->size());
    for (int64_t d : *s) hash.number(static_cast<uint64_t>(d));
  }
  hash.number(static_cast<uint64_t>(p.map));
  hash.number(static_cast<uint64_t>(p.palettes));
  hash.number(static_cast<uint64_t>(p.nonzero));
  hash.number(p.nonzero_only ? 1 : 0);
  for (const ir::PackedArray* a : {&p.codes, &p.offset}) {
    hash.number(static_cast<uint64_t>(a->dtype));
    hash.number(static_cast<uint64_t>(a->bits));
    hash.number(static_cast<uint64_t>(a->count));
    add_bytes(hash, a->data);
  }
  for (const Tensor* t : {&p.mask, &p.table, &p.scale}) {
    hash.number(t->defined() ? static_cast<uint64_t>(t->dtype) : 0);
    add_bytes(hash, *t);
  }
}

void add_constant(ContentHash& hash, const ir::ConstValue& value) {
  hash.text(value.type.str());
  hash.number(value.packed ? 1 : 0);
  if (value.packed) add_packed(hash, *value.packed);
  const Tensor& t = value.tensor;
  hash.number(t.defined() ? 1 : 0);
  if (t.defined()) {
    hash.number(static_cast<uint64_t>(t.dtype));
    hash.number(t.shape.size());
    for (int64_t d : t.shape) hash.number(static_cast<uint64_t>(d));
    if (t.data) hash.stable_bytes(t.data, t.nbytes());
  }
  hash.number(value.strings.size());
  for (const std::string& s : value.strings) hash.text(s);
  hash.number(value.items.size());
  for (const ir::ConstValue& item : value.items) add_constant(hash, item);
}

void release_tensor_pages(const Tensor& t) {
  if (t.defined() && t.data) format::BlobFile::release_pages(t.data, t.nbytes());
}

void release_value_pages(const ir::ConstValue& value) {
  release_tensor_pages(value.tensor);
  if (const ir::PackedTensor* p = value.packed.get()) {
    for (const Tensor* t : {&p->codes.data, &p->offset.data, &p->mask, &p->table, &p->scale}) release_tensor_pages(*t);
  }
  for (const ir::ConstValue& item : value.items) release_value_pages(item);
}

// The ports OpenVINO reports for an imported model match the region's values.
bool same_port(const ov::Output<const ov::Node>& port, const ir::NamedValue& value) {
  std::optional<ov::element::Type> type = element_type(value.type.dtype);
  return type && port.get_element_type() == *type &&
         port.get_partial_shape() == ov::PartialShape(std::vector<ov::Dimension>(value.type.dims.begin(), value.type.dims.end()));
}

}  // namespace

std::string region_cache_path(ov::Core& core, const std::string& dir, const Region& region, const ov::AnyMap& config,
                              bool keep_fp16) {
  ContentHash hash;
  try {
    hash.text("coremlrt openvino region 1");
    hash.text(this_build());
    hash.text(ov::get_openvino_version().buildNumber);
    hash.text(core.get_property("CPU", ov::device::full_name));
    hash.number(keep_fp16 ? 1 : 0);
    hash.number(config.size());
    for (const auto& [key, value] : config) {  // an ordered map: the same options, the same bytes
      hash.text(key);
      hash.text(value.as<std::string>());
    }
  } catch (const std::exception&) {
    return {};  // an option that does not print: no key, no cache
  }
  hash.number(region.inputs.size());
  for (const ir::NamedValue& input : region.inputs) {
    hash.text(input.name);
    hash.text(input.type.str());
  }
  hash.number(region.ops.size());
  for (const ir::Operation* op : region.ops) {
    if (!op->blocks.empty()) return {};
    hash.text(op->type);
    hash.text(op->name);
    hash.number(op->inputs.size());
    for (const auto& [param, bindings] : op->inputs) {
      hash.text(param);
      hash.number(bindings.size());
      for (const ir::Binding& binding : bindings) {
        hash.text(binding.name);
        if (const ir::ConstValue* constant = region.values.constant(binding)) {
          hash.number(1);
          add_constant(hash, *constant);
        } else {
          hash.number(0);
          hash.text(region.values.type(binding).str());
        }
      }
    }
    hash.number(op->outputs.size());
    for (const ir::NamedValue& output : op->outputs) {
      hash.text(output.name);
      hash.text(output.type.str());
    }
    hash.number(op->attributes.size());
    for (const auto& [name, value] : op->attributes) {
      hash.text(name);
      hash.number(value ? 1 : 0);
      if (value) add_constant(hash, *value);
    }
  }
  hash.number(region.outputs.size());
  for (const ir::NamedValue& output : region.outputs) {
    hash.text(output.name);
    hash.text(output.type.str());
  }
  return (fs::path(dir) / (hash.hex() + ".blob")).string();
}

std::optional<CachedRegion> import_cached_region(ov::Core& core, const std::string& path, const Region& region,
                                                 const ov::AnyMap& config) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return std::nullopt;
  try {
    CachedRegion cached;
    // Mapped, not read into our memory: its pages are the page cache's, shared by every process
    // that imports the entry. Mapped by us (format::BlobFile), so that the pages the import has
    // read can be dropped again (release_imported_pages). OpenVINO keeps a reference to the
    // tensor itself, and the kernel keeps the mapping (region_kernel.h).
    std::shared_ptr<format::BlobFile> file = format::BlobFile::open(path, format::BlobFile::Layout::Raw);
    cached.mapping = file->read_raw(0, DType::UInt8, {static_cast<int64_t>(file->size())});
    cached.blob = ov::Tensor(ov::element::u8, ov::Shape{file->size()}, cached.mapping.data);
    cached.compiled = core.import_model(cached.blob, "CPU", config);
    const std::vector<ov::Output<const ov::Node>> inputs = cached.compiled.inputs();
    const std::vector<ov::Output<const ov::Node>> outputs = cached.compiled.outputs();
    if (inputs.size() != region.inputs.size()) return std::nullopt;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!same_port(inputs[i], region.inputs[i])) return std::nullopt;
    if (outputs.size() != region.outputs.size() && outputs.size() != region.outputs.size() + 1) return std::nullopt;
    for (size_t i = 0; i < region.outputs.size(); ++i)
      if (!same_port(outputs[i], region.outputs[i])) return std::nullopt;
    cached.guarded = outputs.size() > region.outputs.size();
    if (cached.guarded) {
      const ov::Output<const ov::Node>& guard = outputs.back();
      if (guard.get_element_type() != ov::element::boolean || !guard.get_partial_shape().is_static() ||
          ov::shape_size(guard.get_shape()) != 1)
        return std::nullopt;
    }
    return cached;
  } catch (const std::exception&) {
    return std::nullopt;  // not a blob this OpenVINO can import: compiled again, and replaced
  }
}

void store_region(ov::CompiledModel compiled, const std::string& path) {
  static std::atomic<uint64_t> writes{0};
  const fs::path target(path);
  std::error_code error;
  fs::create_directories(target.parent_path(), error);
  // Named like an entry (".blob"), so that the cache's byte budget (src/runtime/compiled_cache.h)
  // also removes what a process that died while writing left behind; never a key's name.
  const fs::path partial = target.parent_path() / (target.stem().string() + ".writing-" + std::to_string(::getpid()) + "-" +
                                                   std::to_string(writes++) + ".blob");
  try {
    {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      if (!out) return;
      compiled.export_model(out);
      out.flush();
      if (!out) throw std::runtime_error("write failed");
    }
    fs::rename(partial, target, error);
    if (error) fs::remove(partial, error);
  } catch (const std::exception&) {
    fs::remove(partial, error);
  }
}

namespace {

// An op that runs once, at load (its registry entry's OpTraits::evaluated_at_load: constexpr_*).
bool evaluated_at_load(const ir::Operation& op, int ios_version) {
  const ops::KernelRegistry::Entry* entry = ops::KernelRegistry::cpu().find_entry(op.type, ios_version);
  return entry && entry->traits.evaluated_at_load;
}

}  // namespace

bool shares_large_constants(const Region& region) {
  constexpr size_t kLarge = size_t{1} << 20;
  std::vector<std::pair<uintptr_t, uintptr_t>> large;  // [begin, end) of the region's large constants
  auto each_array = [](const ir::ConstValue& value, auto&& visit) {
    visit(value.tensor);
    if (const ir::PackedTensor* p = value.packed.get())
      for (const Tensor* t : {&p->codes.data, &p->offset.data, &p->mask, &p->table, &p->scale}) visit(*t);
  };
  for (const ir::Operation* op : region.ops)
    for (const auto& [param, bindings] : op->inputs)
      for (const ir::Binding& binding : bindings)
        if (const ir::ConstValue* constant = region.values.constant(binding))
          each_array(*constant, [&](const Tensor& t) {
            if (t.defined() && t.data && t.nbytes() >= kLarge) {
              const auto begin = reinterpret_cast<uintptr_t>(t.data);
              large.emplace_back(begin, begin + t.nbytes());
            }
          });
  if (large.empty()) return false;
  const std::set<const ir::Operation*> inside(region.ops.begin(), region.ops.end());
  bool shared = false;
  for (const ir::Operation& op : region.function.block.operations) {
    if (shared) break;
    // A constexpr op reads its inputs at load only, to make the packed or folded weight the
    // region reads (src/runtime/plan.cc): not a reader that predictions share the mapping with.
    if (inside.count(&op) || op.type == "const" || evaluated_at_load(op, region.function.ios_version)) continue;
    for (const auto& [param, bindings] : op.inputs)
      for (const ir::Binding& binding : bindings) {
        const ir::ConstValue* constant = region.values.constant(binding);
        if (!constant) continue;
        each_array(*constant, [&](const Tensor& t) {
          if (!t.defined() || !t.data) return;
          const auto begin = reinterpret_cast<uintptr_t>(t.data), end = begin + t.nbytes();
          for (const auto& [b, e] : large)
            if (begin < e && b < end) shared = true;
        });
      }
  }
  return shared;
}

void release_imported_pages(const CachedRegion& cached) {
  if (cached.mapping.defined() && cached.mapping.data)
    format::BlobFile::release_pages(cached.mapping.data, cached.mapping.nbytes());
}

void release_constant_pages(const Region& region) {
  for (const ir::Operation* op : region.ops)
    for (const auto& [param, bindings] : op->inputs)
      for (const ir::Binding& binding : bindings)
        if (const ir::ConstValue* constant = region.values.constant(binding)) release_value_pages(*constant);
}

}  // namespace coremlrt::backends::openvino

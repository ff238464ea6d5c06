// item_similarity_recommender: Core ML's itemSimilarityRecommender
// (src/format/classic/recommender_reader.cc says how its features arrive as numbers;
// docs/design/recommender.md what it computes and the choices the format leaves open).
//
// Inputs: `items` (the user's items), optional `count` (int64 [], how many to recommend),
// `restriction` and `exclusion` (lists of items). Constants: `items_form` (0: fp64 [n] scores
// over the vocabulary, NaN for an item not given; 1: int64 codes [m] into the vocabulary, -1
// for an unknown id; 2: item ids as numbers, looked up in `item_ids`), `restriction_form` and
// `exclusion_form` (1 or 2), `shift` fp64 [n] (each item's score adjustment), the edges
// `from`/`to`/`similarity` (an observed item `from` with value r adds similarity * (r -
// shift[from]) to the score of `to`).
// Outputs: 0, int64 [K], the recommended items best first (places in the vocabulary); 1, fp64
// [n], the score of each recommended item, NaN for the others.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "coremlrt/description.h"
#include "ops/feature_vector.h"
#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

// A named namespace: the unity build joins this file with its neighbours.
namespace recommender {

constexpr int32_t kDictionary = 0, kCodes = 1, kIds = 2;

// Reads one list-like input as item places (each once, in first-seen order); unknown ids dropped.
class ItemList {
 public:
  ItemList(KernelBuilder& b, int input, int32_t form, int64_t n, std::shared_ptr<const std::unordered_map<int64_t, int64_t>> ids,
           std::string role)
      : input_(input), form_(form), n_(n), ids_(std::move(ids)), role_(std::move(role)) {
    b.check(form == kCodes || form == kIds, role_, ": unknown form ", form);
  }

  // False for an optional sequence left out of the prediction: it arrives as the one code
  // kAbsentSequenceCode (src/runtime/default_input.h), which differs from an empty list.
  bool given(const KernelContext& ctx) const {
    const Tensor& t = ctx.input(input_);
    return !(form_ == kCodes && t.dtype == DType::Int64 && t.numel() == 1 && t.ptr<int64_t>()[0] == kAbsentSequenceCode);
  }

  std::vector<int64_t> read(const KernelContext& ctx, std::vector<char>& seen) const {
    const Tensor& t = ctx.input(input_);
    std::vector<int64_t> out;
    auto take = [&](int64_t place) {
      if (place >= 0 && !seen[static_cast<size_t>(place)]) {
        seen[static_cast<size_t>(place)] = 1;
        out.push_back(place);
      }
    };
    if (form_ == kCodes) {
      if (t.dtype != DType::Int64) ctx.fail(role_, " must be int64 codes, got ", dtype_name(t.dtype));
      const int64_t* codes = t.ptr<int64_t>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (codes[i] < -1 || codes[i] >= n_)
          ctx.fail(role_, ": code ", codes[i], " is outside [-1, ", n_, "): not an index into the model's items");
        take(codes[i]);
      }
    } else {
      for (double x : FeatureVector(std::vector<int>{input_}, -1).read(ctx)) {
        if (std::floor(x) != x) ctx.fail(role_, ": item id ", x, " is not a whole number");
        if (std::fabs(x) >= 9.2e18) continue;  // no int64 id is this large
        auto it = ids_->find(static_cast<int64_t>(x));
        take(it == ids_->end() ? -1 : it->second);
      }
    }
    return out;
  }

 private:
  int input_;
  int32_t form_;
  int64_t n_;
  std::shared_ptr<const std::unordered_map<int64_t, int64_t>> ids_;
  std::string role_;
};

std::unique_ptr<Kernel> make_item_similarity_recommender(KernelBuilder& b) {
  const Tensor shift = constant_tensor(b, "shift", DType::Float64, 1);
  const Tensor from = constant_tensor(b, "from", DType::Int64, 1);
  const Tensor to = constant_tensor(b, "to", DType::Int64, 1);
  const Tensor similarity = constant_tensor(b, "similarity", DType::Float64, 1);
  const int64_t n = shift.numel();
  const ir::ConstValue* vocabulary = b.constant("output_vocabulary");
  b.check(vocabulary && vocabulary->type.dtype == DType::String && static_cast<int64_t>(vocabulary->strings.size()) == n,
          "needs a string constant 'output_vocabulary' of one entry per item (", n, ")");
  b.check(from.numel() == to.numel() && from.numel() == similarity.numel(), "has ", from.numel(), " sources, ",
          to.numel(), " targets and ", similarity.numel(), " similarities");
  // Edges grouped by source item (CSR), checked once here.
  std::vector<int64_t> start(static_cast<size_t>(n) + 1, 0);
  for (int64_t e = 0; e < from.numel(); ++e) {
    const int64_t i = from.ptr<int64_t>()[e], k = to.ptr<int64_t>()[e];
    b.check(i >= 0 && i < n && k >= 0 && k < n, "edge ", e, " (", i, " -> ", k, ") is outside the ", n, " items");
    ++start[static_cast<size_t>(i) + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<int64_t> fill(start.begin(), start.end() - 1), target(static_cast<size_t>(from.numel()));
  std::vector<double> weight(static_cast<size_t>(from.numel()));
  for (int64_t e = 0; e < from.numel(); ++e) {
    const auto slot = static_cast<size_t>(fill[static_cast<size_t>(from.ptr<int64_t>()[e])]++);
    target[slot] = to.ptr<int64_t>()[e];
    weight[slot] = similarity.ptr<double>()[e];
  }
  auto ids = std::make_shared<std::unordered_map<int64_t, int64_t>>();
  if (b.has("item_ids")) {
    const Tensor item_ids = constant_tensor(b, "item_ids", DType::Int64, 1);
    b.check(item_ids.numel() == n, "has ", item_ids.numel(), " item ids for ", n, " items");
    for (int64_t j = 0; j < n; ++j) ids->emplace(item_ids.ptr<int64_t>()[j], j);
  }
  // "the exclusion input 'not'": the role and the feature bound to it, for messages.
  auto named = [&](const std::string& param, const std::string& role) {
    auto it = b.op().inputs.find(param);
    return it == b.op().inputs.end() || it->second.empty() ? role : role + " '" + it->second[0].name + "'";
  };
  auto list_input = [&](const std::string& param, const std::string& plain_role) -> std::optional<ItemList> {
    const int input = b.optional_input(param);
    if (input < 0) return std::nullopt;
    const std::string role = named(param, plain_role);
    const auto form = static_cast<int32_t>(b.const_int(param + "_form"));
    b.check(form != kIds || b.has("item_ids"), role, " takes item ids as numbers, but the model's ids are strings");
    return ItemList(b, input, form, n, ids, role);
  };
  const int items = b.input("items");
  const auto items_form = static_cast<int32_t>(b.const_int("items_form"));
  std::optional<ItemList> item_list;
  if (items_form != kDictionary) item_list = list_input("items", "the item input");
  const int count = b.optional_input("count");
  const std::string count_role = named("count", "the number of recommendations");
  const std::optional<ItemList> restriction = list_input("restriction", "the restriction input");
  const std::optional<ItemList> exclusion = list_input("exclusion", "the exclusion input");
  b.check(b.output_type(0).dtype == DType::Int64 && b.output_type(1).dtype == DType::Float64,
          "outputs must be int64 items and fp64 scores");

  return make_kernel([=](KernelContext& ctx) {
    const auto size = static_cast<size_t>(n);
    // The user's items and their values.
    std::vector<std::pair<int64_t, double>> observed;
    if (items_form == kDictionary) {
      const Tensor& t = ctx.input(items);
      if (t.dtype != DType::Float64 || t.numel() != n)
        ctx.fail("the item dictionary must arrive as fp64 [", n, "], got ", dtype_name(t.dtype), " ",
                 shape_str(t.shape));
      for (int64_t j = 0; j < n; ++j)
        if (!std::isnan(t.ptr<double>()[j])) observed.push_back({j, t.ptr<double>()[j]});
    } else {
      std::vector<char> seen(size, 0);
      if (item_list->given(ctx))
        for (int64_t j : item_list->read(ctx, seen)) observed.push_back({j, 1.0});
    }
    std::vector<double> score(size, 0.0);
    for (const auto& [i, r] : observed) {
      const double adjusted = r - shift.ptr<double>()[i];
      for (auto e = static_cast<size_t>(start[static_cast<size_t>(i)]); e < static_cast<size_t>(start[static_cast<size_t>(i) + 1]); ++e)
        score[static_cast<size_t>(target[e])] += weight[e] * adjusted;
    }
    // Candidates: not excluded (the exclusion input, else the user's items), and restricted.
    std::vector<char> excluded(size, 0);
    if (exclusion && exclusion->given(ctx)) {
      exclusion->read(ctx, excluded);
    } else {
      for (const auto& [i, r] : observed) excluded[static_cast<size_t>(i)] = 1;
    }
    const bool restricted = restriction && restriction->given(ctx);
    std::vector<char> allowed(size, restricted ? 0 : 1);
    if (restricted) restriction->read(ctx, allowed);
    std::vector<int64_t> candidates;
    for (int64_t j = 0; j < n; ++j)
      if (allowed[static_cast<size_t>(j)] && !excluded[static_cast<size_t>(j)]) candidates.push_back(j);
    // Best score first (NaN last), ties by item index.
    auto better = [&](int64_t a, int64_t b) {
      const double sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
      if (std::isnan(sa) != std::isnan(sb)) return std::isnan(sb);
      if (!std::isnan(sa) && sa != sb) return sa > sb;
      return a < b;
    };
    size_t k = candidates.size();
    if (count >= 0) {
      const Tensor& t = ctx.input(count);
      if (t.dtype != DType::Int64 || t.numel() != 1) ctx.fail(count_role, " must be one int64");
      const int64_t wanted = t.ptr<int64_t>()[0];
      if (wanted < 0) ctx.fail(count_role, " is ", wanted, "; it must be 0 or more");
      k = std::min(k, static_cast<size_t>(wanted));
    }
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(k), candidates.end(), better);
    Tensor& list = ctx.allocate_output(0, DType::Int64, {static_cast<int64_t>(k)});
    Tensor& scores = ctx.allocate_output(1, DType::Float64, {n});
    std::fill_n(scores.ptr<double>(), n, std::numeric_limits<double>::quiet_NaN());
    for (size_t r = 0; r < k; ++r) {
      list.ptr<int64_t>()[r] = candidates[r];
      scores.ptr<double>()[candidates[r]] = score[static_cast<size_t>(candidates[r])];
    }
  });
}

}  // namespace recommender

void register_recommender_kernels(KernelRegistry& registry) {
  registry.add("item_similarity_recommender", DTypeSet{DType::Float32, DType::Float64, DType::Int32, DType::Int64},
               recommender::make_item_similarity_recommender);
}

}  // namespace coremlrt::ops

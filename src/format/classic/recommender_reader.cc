// itemSimilarityRecommender (Model field 501): items 0..n-1, each optionally with an id (an
// int64 or a string), and for some items i a list of (item k, similarity s) with i's score
// adjustment. What it computes, and the choices the format leaves open, are in
// docs/design/recommender.md; the op is ops/recommender.cc.
//
// The engine's tensors hold no strings, dictionaries or sequences, so the model's features are
// carried as numbers over the op's `vocabulary` (the item ids, in item order; int64 ids and
// plain indices in decimal, `integer_keys` set), as text_feature_readers.cc carries strings:
//   a dictionary input:  fp64 [n], the score of item j at place j, NaN for an item the
//                        dictionary does not hold (`absent_value`: a rating of 0 is a rating);
//   a sequence input:    int64 [m], the items' places in the vocabulary (-1: an unknown id);
//   a multi-array input: the ids as numbers (int64 ids or indices; not with string ids);
//   the item list:       int64 [K], places in `output_vocabulary` (the same ids), best first;
//   the score output:    fp64 [n] over `output_vocabulary`, NaN for items not recommended.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "classic_recommender.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

// A named namespace: the unity build joins this file with its neighbours.
namespace recommender {

constexpr const char* kType = "itemSimilarityRecommender";
// Without an id list the items are the indices 0..largest; this bounds what a damaged or
// hostile message can make the op allocate per prediction (8 bytes a score).
constexpr uint64_t kMaxItems = uint64_t{1} << 24;

// How the op takes an item input: the `*_form` constants of ops/recommender.cc.
enum Form : int32_t { kDictionary = 0, kCodes = 1, kIds = 2 };

struct Ids {
  std::vector<std::string> entries;  // the vocabulary: one per item, in item order
  bool strings = false;
  std::vector<int64_t> numbers;      // the numeric id of each item (int64 ids, or the index)
};

const FeatureDescription* find(const std::vector<FeatureDescription>& features, const std::string& name) {
  for (const FeatureDescription& f : features)
    if (f.name == name) return &f;
  return nullptr;
}

const char* id_kind(const Ids& ids) { return ids.strings ? "string" : "int64"; }

// A sequence or dictionary feature's element (or key) type matches the model's ids.
void check_element_type(const FeatureDescription& f, const Ids& ids, const char* role) {
  const DType want = ids.strings ? DType::String : DType::Int64;
  COREMLRT_CHECK(f.dtype == want, kType, ": the ", role, " '", f.name, "' is a ", f.type_str(), " feature but the "
                 "model's item ids are ", id_kind(ids), " values");
}

// The form of an input that lists items (the item input as a sequence or multi-array, the
// restriction and exclusion inputs).
int32_t list_form(const FeatureDescription& f, const Ids& ids, const char* role) {
  if (f.kind == FeatureKind::Sequence) {
    check_element_type(f, ids, role);
    return kCodes;
  }
  COREMLRT_CHECK(f.kind == FeatureKind::MultiArray, kType, ": the ", role, " '", f.name, "' is a ",
                 feature_kind_name(f.kind), " feature; it takes a sequence of item ids or a multi-array");
  COREMLRT_CHECK(!ids.strings, kType, ": the ", role, " '", f.name, "' is a multi-array, which cannot hold the "
                 "model's string item ids; declare a sequence of strings");
  return kIds;
}

Ids read_ids(const spec::ItemSimilarityRecommender& model) {
  Ids out;
  const bool int64_ids = model.has_itemint64ids() && model.itemint64ids().vector_size() > 0;
  const bool string_ids = model.has_itemstringids() && model.itemstringids().vector_size() > 0;
  COREMLRT_CHECK(!(int64_ids && string_ids), kType, ": the model gives both int64 and string item ids; it may "
                 "give one list");
  uint64_t largest = 0;
  bool any = false;
  for (const auto& items : model.itemitemsimilarities()) {
    largest = std::max(largest, items.itemid());
    any = true;
    for (const auto& connected : items.similaritemlist()) largest = std::max(largest, connected.itemid());
  }
  if (int64_ids || string_ids) {
    const auto count = static_cast<uint64_t>(int64_ids ? model.itemint64ids().vector_size()
                                                       : model.itemstringids().vector_size());
    COREMLRT_CHECK(!any || largest < count, kType, ": item index ", largest, " is out of range: the model lists ",
                   count, " item ids");
    if (int64_ids) {
      for (int64_t id : model.itemint64ids().vector()) {
        out.numbers.push_back(id);
        out.entries.push_back(std::to_string(id));
      }
    } else {
      out.strings = true;
      out.entries.assign(model.itemstringids().vector().begin(), model.itemstringids().vector().end());
    }
    std::vector<std::string> sorted = out.entries;
    std::sort(sorted.begin(), sorted.end());
    auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    COREMLRT_CHECK(twice == sorted.end(), kType, ": item id '", *twice, "' is listed twice");
    return out;
  }
  COREMLRT_CHECK(any, kType, ": the model has no items (no similarities and no item ids)");
  COREMLRT_CHECK(largest < kMaxItems, kType, ": item index ", largest, " makes more than ", kMaxItems,
                 " items, more than this build takes without an id list");
  for (uint64_t i = 0; i <= largest; ++i) {
    out.numbers.push_back(static_cast<int64_t>(i));
    out.entries.push_back(std::to_string(i));
  }
  return out;
}

}  // namespace recommender

ir::Program read_item_similarity_recommender(const std::string& serialized, const FunctionDescription& description) {
  // Declared here so that they hide the same names of files the unity build joins with this one.
  using recommender::check_element_type;
  using recommender::find;
  using recommender::Ids;
  using recommender::kCodes;
  using recommender::kDictionary;
  using recommender::kType;
  using recommender::list_form;
  using recommender::read_ids;
  spec::ItemSimilarityRecommender model;
  COREMLRT_CHECK(model.ParseFromString(serialized), kType, ": the message does not parse");
  const Ids ids = read_ids(model);
  const auto n = static_cast<int64_t>(ids.entries.size());

  // The similarity graph as edges from the observed item to the scored one, with each item's
  // adjustment (0 for an item without a SimilarItems entry).
  std::vector<double> shift(static_cast<size_t>(n), 0.0);
  std::vector<int64_t> from, to;
  std::vector<double> similarity;
  std::set<uint64_t> listed;
  for (const auto& items : model.itemitemsimilarities()) {
    COREMLRT_CHECK(listed.insert(items.itemid()).second, kType, ": item index ", items.itemid(),
                   " has two similarity lists");
    shift[items.itemid()] = items.itemscoreadjustment();
    for (const auto& connected : items.similaritemlist()) {
      from.push_back(static_cast<int64_t>(items.itemid()));
      to.push_back(static_cast<int64_t>(connected.itemid()));
      similarity.push_back(connected.similarityscore());
    }
  }

  // The features the message names.
  std::string item_name = model.iteminputfeaturename();
  if (item_name.empty()) {
    COREMLRT_CHECK(description.inputs.size() == 1, kType, ": the message names no item input and the description "
                   "declares ", description.inputs.size(), " inputs, so none is the item input by default");
    item_name = description.inputs.front().name;
  }
  const std::string& count_name = model.numrecommendationsinputfeaturename();
  const std::string& restriction_name = model.itemrestrictioninputfeaturename();
  const std::string& exclusion_name = model.itemexclusioninputfeaturename();
  const std::string& list_name = model.recommendeditemlistoutputfeaturename();
  const std::string& score_name = model.recommendeditemscoreoutputfeaturename();
  COREMLRT_CHECK(!list_name.empty() || !score_name.empty(), kType, ": the message names neither the recommended "
                 "item list output nor the item score output");
  COREMLRT_CHECK(list_name != score_name, kType, ": the item list and score outputs are both named '", list_name, "'");

  std::vector<std::pair<std::string, std::string>> inputs;
  std::vector<std::pair<std::string, Const>> constants;
  auto named_input = [&](const std::string& name, const char* role) -> const FeatureDescription& {
    const FeatureDescription* f = find(description.inputs, name);
    COREMLRT_CHECK(f, kType, ": the ", role, " '", name, "' is not an input of the model description");
    return *f;
  };

  const FeatureDescription& item = named_input(item_name, "item input");
  int32_t item_form;
  if (item.kind == FeatureKind::Dictionary) {
    check_element_type(item, ids, "item input");
    item_form = kDictionary;
  } else {
    item_form = list_form(item, ids, "item input");
  }
  inputs.push_back({"items", item_name});
  constants.push_back({"items_form", i32_scalar(item_form)});
  if (!count_name.empty()) {
    const FeatureDescription& count = named_input(count_name, "number of recommendations input");
    COREMLRT_CHECK(count.kind == FeatureKind::Int64, kType, ": the number of recommendations input '", count_name,
                   "' is a ", count.type_str(), " feature; it takes an int64");
    inputs.push_back({"count", count_name});
  }
  for (const auto& [name, param, role] :
       {std::tuple{&restriction_name, "restriction", "item restriction input"},
        std::tuple{&exclusion_name, "exclusion", "item exclusion input"}}) {
    if (name->empty()) continue;
    const FeatureDescription& f = named_input(*name, role);
    inputs.push_back({param, *name});
    constants.push_back({std::string(param) + "_form", i32_scalar(list_form(f, ids, role))});
  }
  std::set<std::string> roles;
  for (const auto& [param, name] : inputs)
    COREMLRT_CHECK(roles.insert(name).second, kType, ": input '", name, "' is named for two roles");
  for (const FeatureDescription& f : description.inputs)
    COREMLRT_CHECK(roles.count(f.name), kType, ": input '", f.name, "' is none of the inputs the message names "
                   "(items, number of recommendations, restriction, exclusion)");

  // Outputs: each named one declared with its type; nothing else declared.
  std::vector<ir::NamedValue> outputs;
  PredictorProgram program(description, kType);
  for (const FeatureDescription& f : description.outputs)
    COREMLRT_CHECK(f.name == list_name || f.name == score_name, kType, ": output '", f.name, "' is neither the "
                   "recommended item list nor the item scores");
  if (!list_name.empty()) {
    const FeatureDescription* f = find(description.outputs, list_name);
    COREMLRT_CHECK(f, kType, ": the recommended item list '", list_name, "' is not an output of the model description");
    COREMLRT_CHECK(f->kind == FeatureKind::Sequence, kType, ": the recommended item list '", list_name, "' is a ",
                   f->type_str(), " feature; it is a sequence of item ids");
    check_element_type(*f, ids, "recommended item list");
  }
  if (!score_name.empty()) {
    const FeatureDescription* f = find(description.outputs, score_name);
    COREMLRT_CHECK(f, kType, ": the item score output '", score_name, "' is not an output of the model description");
    COREMLRT_CHECK(f->kind == FeatureKind::Dictionary, kType, ": the item score output '", score_name, "' is a ",
                   f->type_str(), " feature; it is a dictionary from item id to score");
    check_element_type(*f, ids, "item score output");
  }
  for (const FeatureDescription& f : description.inputs)
    COREMLRT_CHECK(f.name != list_name && f.name != score_name, kType, ": output '", f.name,
                   "' has the name of an input");
  outputs.push_back({list_name.empty() ? program.unused_name("recommended_items") : list_name,
                     tensor_type(DType::Int64, {-1})});
  outputs.push_back({score_name.empty() ? program.unused_name("item_scores") : score_name,
                     tensor_type(DType::Float64, {n})});
  std::vector<std::string> returned;
  for (const FeatureDescription& f : description.outputs) returned.push_back(f.name);

  const auto edges = static_cast<int64_t>(from.size());
  constants.push_back({"vocabulary", string_vector(ids.entries)});
  constants.push_back({"integer_keys", i32_scalar(!ids.strings)});
  constants.push_back({"absent_value", f64_tensor({std::numeric_limits<double>::quiet_NaN()}, {})});
  constants.push_back({"output_vocabulary", string_vector(ids.entries)});
  if (!ids.strings) constants.push_back({"item_ids", i64_tensor(ids.numbers, {n})});
  constants.push_back({"shift", f64_tensor(shift, {n})});
  constants.push_back({"from", i64_tensor(from, {edges})});
  constants.push_back({"to", i64_tensor(to, {edges})});
  constants.push_back({"similarity", f64_tensor(similarity, {edges})});
  program.add_named_op("item_similarity_recommender", inputs, constants, outputs, returned);
  return program.take();
}

std::vector<RoleDefault> item_similarity_defaults(const std::string& serialized) {
  spec::ItemSimilarityRecommender model;
  if (!model.ParseFromString(serialized)) return {};
  std::vector<RoleDefault> out;
  if (!model.numrecommendationsinputfeaturename().empty())
    out.push_back({model.numrecommendationsinputfeaturename(), FeatureKind::Int64, 9007199254740992.0});
  for (const std::string* name : {&model.itemrestrictioninputfeaturename(), &model.itemexclusioninputfeaturename()})
    if (!name->empty()) out.push_back({*name, FeatureKind::Sequence, std::nullopt});
  return out;
}

}  // namespace coremlrt::format::classic

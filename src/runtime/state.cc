#include "coremlrt/state.h"

#include <cstring>

#include "coremlrt/error.h"

namespace coremlrt {

namespace {

std::string names_of(const std::vector<FeatureDescription>& declarations) {
  std::string out;
  for (const auto& d : declarations) out += (out.empty() ? "'" : ", '") + d.name + "'";
  return out.empty() ? "none" : out;
}

}  // namespace

State::State(std::vector<FeatureDescription> declarations) : declarations_(std::move(declarations)) {
  for (const FeatureDescription& d : declarations_) {
    Tensor zeros = Tensor::empty(d.dtype, d.shape);
    if (zeros.nbytes()) std::memset(zeros.data, 0, zeros.nbytes());
    values_[d.name] = std::move(zeros);
  }
}

const FeatureDescription& State::declaration(const std::string& name) const {
  for (const FeatureDescription& d : declarations_)
    if (d.name == name) return d;
  fail("state has no tensor named '", name, "'; its states are ", names_of(declarations_));
}

Tensor State::read(const std::string& name) const {
  declaration(name);
  std::lock_guard<std::mutex> lock(mutex_);
  return values_.at(name).clone();
}

void State::write(const std::string& name, const Tensor& value) {
  const FeatureDescription& d = declaration(name);
  COREMLRT_CHECK(value.dtype == d.dtype, "state '", name, "' holds ", dtype_name(d.dtype), "; cannot write ",
                 dtype_name(value.dtype));
  COREMLRT_CHECK(value.shape == d.shape, "state '", name, "' has shape ", shape_str(d.shape), "; cannot write shape ",
                 shape_str(value.shape));
  Tensor copy = value.clone();
  // Claim the state like a prediction does, so that a prediction starting meanwhile fails
  // instead of overwriting this write with its own result.
  COREMLRT_CHECK(!in_use_.exchange(true), "state '", name, "' cannot be written while a prediction is using it");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[name] = std::move(copy);
  }
  in_use_.store(false);
}

State::Use::Use(State& state, const std::string& where) : state_(state) {
  COREMLRT_CHECK(!state_.in_use_.exchange(true), where,
                 ": the state is already in use by another prediction (a state serves one prediction at a time)");
}

State::Use::~Use() { state_.in_use_.store(false); }

Tensor State::Use::value(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_.mutex_);
  return state_.values_.at(name);
}

void State::Use::commit(const std::string& name, Tensor value) {
  std::lock_guard<std::mutex> lock(state_.mutex_);
  state_.values_[name] = std::move(value);
}

}  // namespace coremlrt

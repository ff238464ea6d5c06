#include "coremlrt/state.h"

#include <cstring>

#include "coremlrt/error.h"

namespace coremlrt {

namespace {

std::string declared_names(const std::vector<FeatureDescription>& declarations) {
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
  fail("state has no tensor named '", name, "'; its states are ", declared_names(declarations_));
}

Tensor State::read(const std::string& name) const {
  declaration(name);
  std::unique_lock<std::mutex> lock(mutex_);
  released_.wait(lock, [this] { return !in_use_.load(); });
  return values_.at(name).clone();
}

void State::write(const std::string& name, const Tensor& value) {
  const FeatureDescription& d = declaration(name);
  COREMLRT_CHECK(value.dtype == d.dtype, "state '", name, "' holds ", dtype_name(d.dtype), "; cannot write ",
                 dtype_name(value.dtype));
  COREMLRT_CHECK(value.shape == d.shape, "state '", name, "' has shape ", shape_str(d.shape), "; cannot write shape ",
                 shape_str(value.shape));
  Tensor copy = value.clone();
  // Under the lock a prediction needs to start, so none starts meanwhile; one already running
  // would commit over this write, so the write is refused instead.
  std::lock_guard<std::mutex> lock(mutex_);
  COREMLRT_CHECK(!in_use_.load(), "state '", name, "' cannot be written while a prediction is using it");
  values_[name] = std::move(copy);
}

State::Use::Use(State& state, const std::string& where) : state_(state) {
  // Taken under the lock so that a read copying the values finishes before the prediction
  // may write into their buffers.
  std::lock_guard<std::mutex> lock(state_.mutex_);
  COREMLRT_CHECK(!state_.in_use_.exchange(true), where,
                 ": the state is already in use by another prediction (a state serves one prediction at a time)");
}

State::Use::~Use() {
  {
    std::lock_guard<std::mutex> lock(state_.mutex_);
    state_.in_use_.store(false);
  }
  state_.released_.notify_all();
}

Tensor State::Use::value(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_.mutex_);
  return state_.values_.at(name);
}

void State::Use::commit(const std::string& name, Tensor value) {
  std::lock_guard<std::mutex> lock(state_.mutex_);
  state_.values_[name] = std::move(value);
}

namespace {
std::atomic<uint64_t> g_state_bytes_copied{0}, g_state_bytes_written{0};
}  // namespace

StateTraffic state_traffic() { return {g_state_bytes_copied.load(), g_state_bytes_written.load()}; }

void add_state_traffic(size_t copied, size_t written) {
  g_state_bytes_copied += copied;
  g_state_bytes_written += written;
}

}  // namespace coremlrt

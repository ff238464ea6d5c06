#pragma once
// State: the persistent tensors (a KV cache, say) that a stateful model reads and writes
// across predictions. Made by Model::make_state(), passed to Model::predict, and usable
// with any model instance whose function declares the same states (name, dtype, shape):
// the functions of one multifunction package can share one state.
//
// A prediction updates its state only when it succeeds as a whole. One state serves one
// prediction at a time: a second prediction that tries to use it concurrently gets an
// Error instead of racing.
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "coremlrt/tensor.h"

namespace coremlrt {

class State {
 public:
  // Zero-filled tensors for every declared state.
  explicit State(std::vector<FeatureDescription> declarations);

  const std::vector<FeatureDescription>& declarations() const { return declarations_; }
  // A copy of the current value. Throws Error for an unknown name (listing the names).
  Tensor read(const std::string& name) const;
  // Replaces the value with a copy of `value`, which must have the declared dtype and shape.
  void write(const std::string& name, const Tensor& value);

  // Used by Model::predict: marks the state busy for one prediction (Error if it already
  // is), hands out the current values, and takes the new ones on success.
  class Use {
   public:
    explicit Use(State& state, const std::string& where);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    Tensor value(const std::string& name) const;
    void commit(const std::string& name, Tensor value);

   private:
    State& state_;
  };

 private:
  const FeatureDescription& declaration(const std::string& name) const;
  std::vector<FeatureDescription> declarations_;
  mutable std::mutex mutex_;  // guards values_ against read/write from other threads
  std::map<std::string, Tensor> values_;
  std::atomic<bool> in_use_{false};
};

}  // namespace coremlrt

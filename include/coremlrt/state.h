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
#include <condition_variable>
#include <cstdint>
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
  // A copy of the current value. Throws Error for an unknown name (listing the names). While
  // a prediction uses the state it waits for that prediction to end: a prediction may write
  // into the state's buffers in place (a KV-cache step), and a read sees only committed values.
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
  mutable std::mutex mutex_;  // guards values_ and in_use_ changes against other threads
  mutable std::condition_variable released_;  // signalled when a prediction stops using the state
  std::map<std::string, Tensor> values_;
  std::atomic<bool> in_use_{false};
};

// Bytes of state that predictions copied and wrote, counted since the process started: a
// state updated in place (a KV-cache step writing one position) copies only the bytes it
// overwrites, kept to restore them if the prediction fails; a state given a whole new value
// counts that value's bytes as both. benchmarks/bench_peers.py reads the counts around a step.
struct StateTraffic {
  uint64_t bytes_copied = 0;
  uint64_t bytes_written = 0;
};
StateTraffic state_traffic();
// Called by the runtime's kernels (src/runtime/execute.cc).
void add_state_traffic(size_t copied, size_t written);

}  // namespace coremlrt

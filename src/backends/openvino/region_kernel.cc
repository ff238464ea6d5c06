#include "backends/openvino/region_kernel.h"

#include <openvino/runtime/infer_request.hpp>

#include <atomic>
#include <cstring>
#include <thread>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

// One execution context's infer request: created on the context's first run, destroyed with the
// context (by the context pool's reaper when it lingers idle; never on a Python thread's behalf).
struct InferState final : ops::KernelState {
  explicit InferState(ov::InferRequest r) : request(std::move(r)) {}
  ov::InferRequest request;
};

struct Port {
  DType dtype;
  Shape shape;  // as the program declares it: -1 for a dim known only at prediction
  ov::element::Type type;

  // Whether a tensor of `dims` has the port's shape (any extent where a dim is -1).
  bool fits(const std::vector<int64_t>& dims) const {
    if (dims.size() != shape.size()) return false;
    for (size_t d = 0; d < dims.size(); ++d)
      if (shape[d] >= 0 && dims[d] != shape[d]) return false;
    return true;
  }
};

std::vector<Port> ports(const std::vector<ir::NamedValue>& values) {
  std::vector<Port> out;
  for (const ir::NamedValue& v : values) out.push_back({v.type.dtype, Shape(v.type.dims.begin(), v.type.dims.end()), *element_type(v.type.dtype)});
  return out;
}

class RegionKernel final : public ops::Kernel {
 public:
  RegionKernel(ov::CompiledModel compiled, const Region& region, std::vector<Tensor> kept, int streams, bool guarded,
               ov::Tensor blob)
      : blob_(std::move(blob)), compiled_(std::move(compiled)), inputs_(ports(region.inputs)), outputs_(ports(region.outputs)),
        kept_(std::move(kept)), direct_calls_(streams == 1), guarded_(guarded) {}

  void run(ops::KernelContext& ctx) const override {
    std::unique_ptr<ops::KernelState>& state = ctx.kernel_state();
    try {
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const Tensor& t = ctx.input(static_cast<int>(i));
        // Not the shapes the program declared (and the region was compiled for): our kernels.
        if (t.dtype != inputs_[i].dtype || !inputs_[i].fits(t.shape)) return run_ours(ctx);
      }
      if (!state) state = std::make_unique<InferState>(const_cast<ov::CompiledModel&>(compiled_).create_infer_request());
      ov::InferRequest& request = static_cast<InferState&>(*state).request;
      // Inputs are wrapped, not copied, for this call only (docs/design/architecture.md, law 4: the next run
      // binds new tensors before anything is read).
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const Tensor& t = ctx.input(static_cast<int>(i));
        const Port& port = inputs_[i];
        request.set_input_tensor(i, ov::Tensor(port.type, ov::Shape(t.shape.begin(), t.shape.end()), t.data));
      }
      run_request(request);
      if (guarded_) {
        const ov::Tensor guard = request.get_output_tensor(outputs_.size());
        if (guard.get_element_type() != ov::element::boolean || guard.get_size() != 1)
          ctx.fail("OpenVINO returned the region's guard as ", guard.get_element_type().get_type_name(), " ",
                   guard.get_shape().to_string());
        // A condition of the lowering does not hold (an index out of range): our kernels decide.
        if (!*static_cast<const char*>(guard.data())) return run_ours(ctx);
      }
      // A region over dims known only at prediction has its output dims from OpenVINO's shape
      // inference. Where they differ from a dim the program declares, the program's declared
      // shapes do not hold for this input (docs/design/declared-shapes.md): our kernels decide,
      // as for inputs that differ from the declared shapes above.
      for (size_t i = 0; i < outputs_.size(); ++i) {
        const ov::Shape got = request.get_output_tensor(i).get_shape();
        if (!outputs_[i].fits(Shape(got.begin(), got.end()))) return run_ours(ctx);
      }
      // Outputs are copied out of the request's own tensors. Handing OpenVINO our buffers with
      // set_output_tensor is not enough: an output the CPU plugin computes in place of an input
      // (a region ending in identity, or a reshape it drops) is then never written to them.
      for (size_t i = 0; i < outputs_.size(); ++i) {
        const Port& port = outputs_[i];
        const ov::Tensor result = request.get_output_tensor(i);
        const ov::Shape got = result.get_shape();
        Tensor& out = ctx.allocate_output(static_cast<int>(i), port.dtype, Shape(got.begin(), got.end()));
        if (result.get_byte_size() != out.nbytes() || result.get_element_type() != port.type)
          ctx.fail_as(ErrorKind::Internal, "OpenVINO returned output #", i, " as ", result.get_element_type().get_type_name(), " ",
                   result.get_shape().to_string(), "; the region declares ", dtype_name(port.dtype), " ",
                   shape_str(port.shape));
        std::memcpy(out.data, result.data(), out.nbytes());
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // The region's inputs were checked like any op's: a failure inside OpenVINO is its own.
      ctx.fail_as(ErrorKind::Internal, "OpenVINO: ", e.what());
    }
  }

 private:
  static void run_ours(ops::KernelContext& ctx) {
    std::vector<Tensor> outputs = ctx.run_block(0, {});
    for (size_t j = 0; j < outputs.size(); ++j) ctx.set_output(static_cast<int>(j), std::move(outputs[j]));
  }

  // A synchronous infer runs the compiled model on the calling thread, which joins the stream's
  // TBB arena for the call. With benchmarks/soak.py (4 threads predicting on one-stream models):
  // when several threads do that, memory that TBB allocates through its scalable allocator as it
  // spawns the plugin's tasks keeps growing, outside malloc's heap and our buffers
  // (docs/reports/performance.md, "Measurements behind code choices"); one calling thread stays flat, and so
  // does every thread when the call is handed to the stream's own threads (start_async + wait),
  // which adds a little to every call (docs/reports/performance.md, "Measurements behind code choices").
  // So the first thread to run a one-stream model keeps the
  // direct call, the common single-threaded loop pays nothing, and every other thread hands its
  // calls over. A model compiled with several streams (concurrent_predictions > 1) is fed by
  // hand-overs only: each call then goes to whichever stream is free.
  void run_request(ov::InferRequest& request) const {
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id unset{};
    if (direct_calls_ && (home_thread_.compare_exchange_strong(unset, me) || unset == me)) {
      request.infer();
      return;
    }
    request.start_async();
    request.wait();
  }

  ov::Tensor blob_;  // declared first, destroyed last: the compiled model may read from it
  ov::CompiledModel compiled_;
  std::vector<Port> inputs_, outputs_;
  std::vector<Tensor> kept_;
  const bool direct_calls_;
  const bool guarded_;
  mutable std::atomic<std::thread::id> home_thread_{};
};

}  // namespace

std::unique_ptr<ops::Kernel> make_region_kernel(ov::CompiledModel compiled, const Region& region, std::vector<Tensor> kept,
                                                int streams, bool guarded, ov::Tensor blob) {
  return std::make_unique<RegionKernel>(std::move(compiled), region, std::move(kept), streams, guarded, std::move(blob));
}

}  // namespace coremlrt::backends::openvino

#include "backends/openvino/region_kernel.h"

#include <openvino/runtime/infer_request.hpp>

#include <cstring>

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
  Shape shape;
  ov::element::Type type;
};

std::vector<Port> ports(const std::vector<ir::NamedValue>& values) {
  std::vector<Port> out;
  for (const ir::NamedValue& v : values) out.push_back({v.type.dtype, Shape(v.type.dims.begin(), v.type.dims.end()), *element_type(v.type.dtype)});
  return out;
}

class RegionKernel final : public ops::Kernel {
 public:
  RegionKernel(ov::CompiledModel compiled, const Region& region, std::vector<Tensor> kept)
      : compiled_(std::move(compiled)), inputs_(ports(region.inputs)), outputs_(ports(region.outputs)), kept_(std::move(kept)) {}

  void run(ops::KernelContext& ctx) const override {
    std::unique_ptr<ops::KernelState>& state = ctx.kernel_state();
    try {
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const Tensor& t = ctx.input(static_cast<int>(i));
        if (t.dtype != inputs_[i].dtype || t.shape != inputs_[i].shape) {
          // Not the shapes the program declared (and the region was compiled for): our kernels.
          std::vector<Tensor> outputs = ctx.run_block(0, {});
          for (size_t j = 0; j < outputs.size(); ++j) ctx.set_output(static_cast<int>(j), std::move(outputs[j]));
          return;
        }
      }
      if (!state) state = std::make_unique<InferState>(const_cast<ov::CompiledModel&>(compiled_).create_infer_request());
      ov::InferRequest& request = static_cast<InferState&>(*state).request;
      // Inputs are wrapped, not copied, for this call only (docs/architecture.md, law 4: the next run
      // binds new tensors before anything is read).
      for (size_t i = 0; i < inputs_.size(); ++i) {
        const Tensor& t = ctx.input(static_cast<int>(i));
        const Port& port = inputs_[i];
        request.set_input_tensor(i, ov::Tensor(port.type, ov::Shape(t.shape.begin(), t.shape.end()), t.data));
      }
      request.start_async();
      request.wait();
      // Outputs are copied out of the request's own tensors. Handing OpenVINO our buffers with
      // set_output_tensor is not enough: an output the CPU plugin computes in place of an input
      // (a region ending in identity, or a reshape it drops) is then never written to them.
      for (size_t i = 0; i < outputs_.size(); ++i) {
        const Port& port = outputs_[i];
        const ov::Tensor result = request.get_output_tensor(i);
        Tensor& out = ctx.allocate_output(static_cast<int>(i), port.dtype, port.shape);
        if (result.get_byte_size() != out.nbytes() || result.get_element_type() != port.type)
          ctx.fail("OpenVINO returned output #", i, " as ", result.get_element_type().get_type_name(), " ",
                   result.get_shape().to_string(), "; the region declares ", dtype_name(port.dtype), " ",
                   shape_str(port.shape));
        std::memcpy(out.data, result.data(), out.nbytes());
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      ctx.fail("OpenVINO: ", e.what());
    }
  }

 private:
  ov::CompiledModel compiled_;
  std::vector<Port> inputs_, outputs_;
  std::vector<Tensor> kept_;
};

}  // namespace

std::unique_ptr<ops::Kernel> make_region_kernel(ov::CompiledModel compiled, const Region& region, std::vector<Tensor> kept) {
  return std::make_unique<RegionKernel>(std::move(compiled), region, std::move(kept));
}

}  // namespace coremlrt::backends::openvino

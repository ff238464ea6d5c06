// Moves between channels and space (our kernels: src/ops/space.cc): depth_to_space and
// space_to_depth in TensorFlow's DCR order, pixel_shuffle and pixel_unshuffle in PyTorch's CRD
// order, each the same reshape, transpose and reshape as our kernel's view (leading dims as one
// batch dim), to the program's declared output dims.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

enum class Kind { DepthToSpace, SpaceToDepth, PixelShuffle, PixelUnshuffle };

OpLowering block_move(Kind kind, const char* param) {
  return {[kind, param](const OpReader& op) -> Verdict {
            const std::vector<int64_t>& x = op.type("x").dims;
            const int64_t f = op.const_int(param);
            if (x.size() < 3 || f < 1) return Verdict::refuse("x has rank < 3 or the factor is below 1");
            const int64_t c = x[x.size() - 3], h = x[x.size() - 2], w = x.back();
            const bool to_space = kind == Kind::DepthToSpace || kind == Kind::PixelShuffle;
            if (to_space ? c % (f * f) != 0 : h % f != 0 || w % f != 0)
              return Verdict::refuse("dims not divisible by the factor");
            return Verdict::claim();
          },
          [kind, param](Lowerer& op) -> std::vector<Value> {
            const std::vector<int64_t>& x = op.type("x").dims;
            const int64_t f = op.const_int(param);
            int64_t n = 1;
            for (size_t d = 0; d + 3 < x.size(); ++d) n *= x[d];
            const int64_t c = x[x.size() - 3], h = x[x.size() - 2], w = x.back();
            std::vector<int64_t> view, perm;
            if (kind == Kind::DepthToSpace) view = {n, f, f, c / (f * f), h, w}, perm = {0, 3, 4, 1, 5, 2};
            else if (kind == Kind::PixelShuffle) view = {n, c / (f * f), f, f, h, w}, perm = {0, 1, 4, 2, 5, 3};
            else view = {n, c, h / f, f, w / f, f}, perm = kind == Kind::SpaceToDepth ? std::vector<int64_t>{0, 3, 5, 1, 2, 4}
                                                                                       : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
            Value y = std::make_shared<v1::Reshape>(op.input("x"), Lowerer::i64s(view), false);
            y = std::make_shared<v1::Transpose>(y, Lowerer::i64s(perm));
            return {std::make_shared<v1::Reshape>(y, Lowerer::i64s(op.output_type(0).dims), false)};
          }};
}

}  // namespace

void add_space_lowerings(LoweringTable& t) {
  t["depth_to_space"] = block_move(Kind::DepthToSpace, "block_size");
  t["space_to_depth"] = block_move(Kind::SpaceToDepth, "block_size");
  t["pixel_shuffle"] = block_move(Kind::PixelShuffle, "upscale_factor");
  t["pixel_unshuffle"] = block_move(Kind::PixelUnshuffle, "downscale_factor");
}

}  // namespace coremlrt::backends::openvino

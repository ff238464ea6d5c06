// Moves between channels/batch and space (docs/design/coreml-format.md, "Tensor transformations"):
// depth_to_space and space_to_depth (TensorFlow DCR order), pixel_shuffle and pixel_unshuffle (PyTorch CRD
// order), space_to_batch and batch_to_space. Each is a transpose of a reshaped view.
#include <cstring>

#include "ops/register.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

enum class Kind { DepthToSpace, SpaceToDepth, PixelShuffle, PixelUnshuffle };

// x is [..., C, H, W]; leading dims act as one batch dim n.
KernelFactory block_factory(Kind kind, const char* param) {
  return [kind, param](KernelBuilder& b) {
    const int x = b.input("x");
    const int64_t f = b.const_int(param);
    b.check(f > 0, param, " must be positive, got ", f);
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      if (in.rank() < 3) ctx.fail("x must have rank >= 3, got ", shape_str(in.shape));
      const int64_t r = in.rank();
      const int64_t n = shape_numel(Shape(in.shape.begin(), in.shape.end() - 3));
      const int64_t c = in.shape[r - 3], h = in.shape[r - 2], w = in.shape[r - 1];
      Shape out_shape(in.shape.begin(), in.shape.end() - 3);
      Shape view;
      std::vector<int64_t> perm;
      if (kind == Kind::DepthToSpace || kind == Kind::PixelShuffle) {
        if (c % (f * f)) ctx.fail("channels ", c, " are not divisible by ", f * f);
        const int64_t c2 = c / (f * f);
        // DCR: channel = (i * f + j) * C' + c;  CRD: channel = c * f * f + i * f + j.
        if (kind == Kind::DepthToSpace) view = {n, f, f, c2, h, w}, perm = {0, 3, 4, 1, 5, 2};
        else view = {n, c2, f, f, h, w}, perm = {0, 1, 4, 2, 5, 3};
        out_shape.insert(out_shape.end(), {c2, h * f, w * f});
      } else {
        if (h % f || w % f) ctx.fail("spatial size ", h, "x", w, " is not divisible by ", f);
        view = {n, c, h / f, f, w / f, f};
        // view dims: 0 n, 1 c, 2 h', 3 i, 4 w', 5 j
        if (kind == Kind::SpaceToDepth) perm = {0, 3, 5, 1, 2, 4};
        else perm = {0, 1, 3, 5, 2, 4};
        out_shape.insert(out_shape.end(), {c * f * f, h / f, w / f});
      }
      Tensor& out = ctx.allocate_output(0, in.dtype, out_shape);
      Shape permuted;
      for (int64_t p : perm) permuted.push_back(view[p]);
      Tensor target = out.reshaped(permuted);
      permute_copy(in, view, perm, target);
    });
  };
}

std::vector<int64_t> two_by_two(KernelBuilder& b, const char* param) {
  std::vector<int64_t> v = b.const_ints(param);
  b.check(v.size() == 4, param, " must have shape [2, 2]");
  for (int64_t p : v) b.check(p >= 0, param, " must not be negative");
  return v;
}

// TF SpaceToBatchND on [n, C, H, W]: output batch (i * b1 + j) * n + b holds
// padded[b, :, h * b0 + i, w * b1 + j].
std::unique_ptr<Kernel> space_to_batch(KernelBuilder& b) {
  const int x = b.input("x");
  const std::vector<int64_t> block = b.const_ints("block_shape"), pads = two_by_two(b, "paddings");
  b.check(block.size() == 2 && block[0] > 0 && block[1] > 0, "block_shape must be two positive ints");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() != 4) ctx.fail("x must have rank 4, got ", shape_str(in.shape));
    const int64_t n = in.shape[0], c = in.shape[1];
    const int64_t hp = in.shape[2] + pads[0] + pads[1], wp = in.shape[3] + pads[2] + pads[3];
    if (hp % block[0] || wp % block[1]) ctx.fail("padded size ", hp, "x", wp, " is not divisible by the block shape");
    Tensor padded = Tensor::empty(in.dtype, {n, c, hp, wp});
    if (padded.nbytes()) std::memset(padded.data, 0, padded.nbytes());
    StridedView to = contiguous_view(padded.shape);
    to.offset = pads[0] * to.strides[2] + pads[2] * to.strides[3];
    copy_strided(dtype_size(in.dtype), in.shape, in.data, contiguous_view(in.shape), padded.data, to);
    const int64_t h = hp / block[0], w = wp / block[1];
    Tensor& out = ctx.allocate_output(0, in.dtype, {n * block[0] * block[1], c, h, w});
    Tensor target = out.reshaped({block[0], block[1], n, c, h, w});
    permute_copy(padded, {n, c, h, block[0], w, block[1]}, {3, 5, 0, 1, 2, 4}, target);
  });
}

std::unique_ptr<Kernel> batch_to_space(KernelBuilder& b) {
  const int x = b.input("x");
  const std::vector<int64_t> block = b.const_ints("block_shape"), crops = two_by_two(b, "crops");
  b.check(block.size() == 2 && block[0] > 0 && block[1] > 0, "block_shape must be two positive ints");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() != 4) ctx.fail("x must have rank 4, got ", shape_str(in.shape));
    const int64_t bb = block[0] * block[1];
    if (in.shape[0] % bb) ctx.fail("batch ", in.shape[0], " is not divisible by the block size ", bb);
    const int64_t n = in.shape[0] / bb, c = in.shape[1], h = in.shape[2], w = in.shape[3];
    const int64_t hf = h * block[0], wf = w * block[1];
    if (crops[0] + crops[1] > hf || crops[2] + crops[3] > wf) ctx.fail("crops exceed the spatial size");
    Tensor full = Tensor::empty(in.dtype, {n, c, h, block[0], w, block[1]});
    permute_copy(in, {block[0], block[1], n, c, h, w}, {2, 3, 4, 0, 5, 1}, full);
    const Shape full_shape{n, c, hf, wf};
    StridedView from = contiguous_view(full_shape);
    from.offset = crops[0] * from.strides[2] + crops[2] * from.strides[3];
    copy_view(full, from, ctx.allocate_output(0, in.dtype, {n, c, hf - crops[0] - crops[1], wf - crops[2] - crops[3]}));
  });
}

}  // namespace

void register_space_kernels(KernelRegistry& registry) {
  // Permuted copies: any dtype.
  registry.add("depth_to_space", kAnyDType, block_factory(Kind::DepthToSpace, "block_size"));
  registry.add("space_to_depth", kAnyDType, block_factory(Kind::SpaceToDepth, "block_size"));
  registry.add("pixel_shuffle", kAnyDType, block_factory(Kind::PixelShuffle, "upscale_factor"));
  registry.add("pixel_unshuffle", kAnyDType, block_factory(Kind::PixelUnshuffle, "downscale_factor"), 16);
  registry.add("space_to_batch", kAnyDType, space_to_batch);
  registry.add("batch_to_space", kAnyDType, batch_to_space);
}

}  // namespace coremlrt::ops

// non_maximum_suppression (docs/design/coreml-format.md, "Tensor operations"), in its iOS15 form
// (boxes [n, B, 4], scores [n, B, K], a score threshold and a count output) and its iOS17 form (boxes
// [n, 4, B], scores [n, K, B], no threshold, no count); and non_maximum_suppression_model, the
// nonMaximumSuppression model type (format/classic/nms_reader.cc), which selects with the same
// select() below.
//
// Greedy NMS per batch entry: a box's score is its best class score (and, with
// per_class_suppression, its class is that best class); boxes are visited in descending
// score order (ties: lower box index first, so results are deterministic) and one is kept
// unless its IoU with an already kept box (of the same class, with per_class_suppression)
// exceeds iou_threshold. At most max_boxes are kept; the remaining output rows are padded
// with zero boxes, zero scores and index -1 (the value PyTorch's converter filters on).
// Boxes are (center x, center y, width, height). How the score threshold is held, and what
// happens when no box passes it: ScoreRule below; docs/design/detection.md gives the evidence.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

std::vector<double> widen_to_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype, "non_maximum_suppression", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.ptr<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<compute_t<T>>(p[i]));
  });
  return out;
}

struct Box {
  double x1, y1, x2, y2;
};

Box corners(double cx, double cy, double w, double h) {
  // min/max: a negative width or height still describes a box.
  return {std::min(cx - w / 2, cx + w / 2), std::min(cy - h / 2, cy + h / 2), std::max(cx - w / 2, cx + w / 2),
          std::max(cy - h / 2, cy + h / 2)};
}

double iou(const Box& a, const Box& b) {
  const double iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  const double ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  if (iw <= 0 || ih <= 0) return 0;
  const double inter = iw * ih;
  const double uni = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter;
  return uni > 0 ? inter / uni : 0;
}

// How a box's best score is held against the score threshold, and what happens when no box
// passes it (docs/design/detection.md gives the evidence for each):
//  - the ops (non_maximum_suppression, the neuralNetwork layer): a box needs a score above the
//    threshold, and when none passes the single best-scoring box is returned all the same, as
//    coremltools' reference of Core ML's op does;
//  - the nonMaximumSuppression model type: boxes below the threshold go (a box at it stays),
//    and no box passing means no rows.
enum class ScoreRule { AboveOrBest, NotBelow };

struct NmsParams {
  bool ios17 = false;
  double iou_threshold = 0;
  bool has_score_threshold = false;
  double score_threshold = 0;
  ScoreRule rule = ScoreRule::AboveOrBest;
  int64_t max_boxes = 0;
  bool per_class = false;
};

// Indices of the kept boxes of one batch entry, best first. box(i, c) is coordinate c of
// box i; score(i, k) is its score for class k.
template <class BoxAt, class ScoreAt>
std::vector<int64_t> select(const NmsParams& p, int64_t count, int64_t classes, BoxAt box, ScoreAt score) {
  std::vector<double> best(static_cast<size_t>(count), -INFINITY);
  std::vector<int64_t> label(static_cast<size_t>(count), 0);
  std::vector<int64_t> order;
  int64_t fallback = -1;  // the best box below the threshold (ScoreRule::AboveOrBest)
  for (int64_t i = 0; i < count; ++i) {
    bool ranked = false;
    for (int64_t k = 0; k < classes; ++k) {
      const double s = score(i, k);
      if (std::isnan(s)) continue;
      if (!ranked || s > best[i]) best[i] = s, label[i] = k, ranked = true;
    }
    if (!ranked) continue;  // no classes, or only NaN scores: nothing to rank the box by
    if (p.has_score_threshold) {
      const bool passes = p.rule == ScoreRule::NotBelow ? best[i] >= p.score_threshold : best[i] > p.score_threshold;
      if (!passes) {
        if (p.rule == ScoreRule::AboveOrBest && (fallback < 0 || best[i] > best[fallback])) fallback = i;
        continue;
      }
    }
    order.push_back(i);
  }
  if (order.empty() && fallback >= 0 && p.max_boxes > 0) return {fallback};
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return best[a] > best[b]; });
  std::vector<int64_t> kept;
  std::vector<Box> kept_boxes;
  for (int64_t i : order) {
    if (static_cast<int64_t>(kept.size()) >= p.max_boxes) break;
    const Box candidate = corners(box(i, 0), box(i, 1), box(i, 2), box(i, 3));
    bool suppressed = false;
    for (size_t j = 0; j < kept.size() && !suppressed; ++j)
      suppressed = (!p.per_class || label[kept[j]] == label[i]) && iou(candidate, kept_boxes[j]) > p.iou_threshold;
    if (suppressed) continue;
    kept.push_back(i);
    kept_boxes.push_back(candidate);
  }
  return kept;
}

// The one number a threshold input holds; fails naming `what` otherwise (or when NaN).
double single_number(KernelContext& ctx, int index, const char* what) {
  const Tensor& t = ctx.input(index);
  if (t.numel() != 1) ctx.fail(what, " must be one number, got shape ", shape_str(t.shape));
  double value = 0;
  switch (t.dtype) {
    case DType::Float16: value = static_cast<float>(*t.ptr<half>()); break;
    case DType::Float32: value = *t.ptr<float>(); break;
    case DType::Float64: value = *t.ptr<double>(); break;
    case DType::Int32: value = *t.ptr<int32_t>(); break;
    case DType::Int64: value = static_cast<double>(*t.ptr<int64_t>()); break;
    default: ctx.fail(what, " must be a number, got ", dtype_name(t.dtype));
  }
  if (std::isnan(value)) ctx.fail(what, " is NaN");
  return value;
}

template <class T>
void write_selection(const NmsParams& p, const Tensor& boxes, const Tensor& scores, KernelContext& ctx) {
  // Layout: iOS15 [n, B, 4] / [n, B, K]; iOS17 [n, 4, B] / [n, K, B].
  const int64_t n = boxes.shape[0];
  const int64_t count = p.ios17 ? boxes.shape[2] : boxes.shape[1];
  const int64_t classes = p.ios17 ? scores.shape[1] : scores.shape[2];
  const int64_t m = p.max_boxes;
  const std::vector<double> bx = widen_to_doubles(boxes), sc = widen_to_doubles(scores);
  Tensor& out_boxes = ctx.allocate_output(0, boxes.dtype, p.ios17 ? Shape{n, 4, m} : Shape{n, m, 4});
  Tensor& out_scores = ctx.allocate_output(1, scores.dtype, p.ios17 ? Shape{n, classes, m} : Shape{n, m, classes});
  Tensor& out_indices = ctx.allocate_output(2, DType::Int32, {n, m});
  int32_t* counts = p.ios17 ? nullptr : ctx.allocate_output(3, DType::Int32, {n}).ptr<int32_t>();
  T* ob = out_boxes.ptr<T>();
  T* os = out_scores.ptr<T>();
  int32_t* oi = out_indices.ptr<int32_t>();
  std::fill(ob, ob + out_boxes.numel(), T(0));
  std::fill(os, os + out_scores.numel(), T(0));
  std::fill(oi, oi + out_indices.numel(), -1);
  for (int64_t b = 0; b < n; ++b) {
    const double* bb = &bx[static_cast<size_t>(b * count * 4)];
    const double* sb = &sc[static_cast<size_t>(b * count * classes)];
    auto box = [&](int64_t i, int c) { return p.ios17 ? bb[c * count + i] : bb[i * 4 + c]; };
    auto score = [&](int64_t i, int64_t k) { return p.ios17 ? sb[k * count + i] : sb[i * classes + k]; };
    const std::vector<int64_t> kept = select(p, count, classes, box, score);
    // Copy the kept rows from the inputs themselves, so fp16 values come back bit-exact.
    const T* ib = boxes.ptr<T>() + b * count * 4;
    const T* is = scores.ptr<T>() + b * count * classes;
    for (size_t r = 0; r < kept.size(); ++r) {
      const int64_t i = kept[r], row = static_cast<int64_t>(r);
      for (int c = 0; c < 4; ++c) {
        if (p.ios17) ob[(b * 4 + c) * m + row] = ib[c * count + i];
        else ob[(b * m + row) * 4 + c] = ib[i * 4 + c];
      }
      for (int64_t k = 0; k < classes; ++k) {
        if (p.ios17) os[(b * classes + k) * m + row] = is[k * count + i];
        else os[(b * m + row) * classes + k] = is[i * classes + k];
      }
      oi[b * m + row] = static_cast<int32_t>(i);
    }
    if (counts) counts[b] = static_cast<int32_t>(kept.size());
  }
}

KernelFactory nms_factory(bool ios17) {
  return [ios17](KernelBuilder& b) {
    const int boxes = b.input("boxes"), scores = b.input("scores");
    const DType db = b.input_type("boxes").dtype, ds = b.input_type("scores").dtype;
    b.check(db == DType::Float32 || db == DType::Float16, "boxes must be fp16 or fp32, got ", dtype_name(db));
    b.check(ds == db, "scores (", dtype_name(ds), ") must have the dtype of boxes (", dtype_name(db), ")");
    NmsParams p;
    p.ios17 = ios17;
    // An ML program gives the thresholds and max_boxes as constants; a neuralNetwork layer
    // (format/neural_network/detection_layers.cc) may give them as inputs known at run time.
    auto runtime = [&](const char* param) { return b.has(param) && !b.is_constant(param) ? b.input(param) : -1; };
    const int iou_input = runtime("iou_threshold"), max_input = runtime("max_boxes");
    const int score_input = ios17 ? -1 : runtime("score_threshold");
    if (iou_input < 0) p.iou_threshold = b.const_float("iou_threshold");
    if (!ios17) {
      p.has_score_threshold = true;
      if (score_input < 0) p.score_threshold = b.const_float("score_threshold");
    }
    if (max_input < 0) {
      p.max_boxes = b.const_int("max_boxes");
      b.check(p.max_boxes >= 0, "max_boxes must not be negative, got ", p.max_boxes);
    }
    p.per_class = b.const_bool("per_class_suppression", false);
    b.check(b.op().outputs.size() == (ios17 ? 3u : 4u), "expects ", ios17 ? 3 : 4, " outputs, the op has ",
            b.op().outputs.size());
    return make_kernel([=](KernelContext& ctx) {
      NmsParams q = p;
      if (iou_input >= 0) q.iou_threshold = single_number(ctx, iou_input, "the IoU threshold");
      if (score_input >= 0) q.score_threshold = single_number(ctx, score_input, "the score threshold");
      if (max_input >= 0) {
        const double m = single_number(ctx, max_input, "max_boxes");
        if (!(m >= 0) || m != std::floor(m) || m > static_cast<double>(INT32_MAX))
          ctx.fail("max_boxes must be a whole number from 0 to 2^31 - 1, got ", m);
        q.max_boxes = static_cast<int64_t>(m);
      }
      const Tensor& tb = ctx.input(boxes);
      const Tensor& ts = ctx.input(scores);
      const int64_t box_axis = ios17 ? 2 : 1, coord_axis = ios17 ? 1 : 2;
      if (tb.rank() != 3 || ts.rank() != 3 || tb.shape[coord_axis] != 4 || ts.shape[0] != tb.shape[0] ||
          ts.shape[box_axis] != tb.shape[box_axis])
        ctx.fail("boxes ", shape_str(tb.shape), " and scores ", shape_str(ts.shape), " do not have the ",
                 ios17 ? "[n, 4, B] and [n, K, B]" : "[n, B, 4] and [n, B, K]", " layout");
      if (tb.dtype != ts.dtype) ctx.fail("boxes and scores must have the same dtype");
      dispatch_float(tb.dtype, "non_maximum_suppression",
                     [&](auto tag) { write_selection<typename decltype(tag)::type>(q, tb, ts, ctx); });
    });
  };
}

// The nonMaximumSuppression model type (format/classic/nms_reader.cc): confidence [B, C] and
// coordinates [B, 4] in, the kept rows of both out, best first, at least min_boxes rows (zero
// rows pad) and at most max_boxes (-1: no limit). The thresholds come from the optional double
// inputs when bound, else from the message. docs/design/detection.md.
template <class T>
void write_kept_rows(const NmsParams& p, int64_t min_rows, const Tensor& confidence, const Tensor& coordinates,
                     KernelContext& ctx) {
  const int64_t count = confidence.shape[0], classes = confidence.shape[1];
  const T* sc = confidence.ptr<T>();
  const T* bx = coordinates.ptr<T>();
  auto box = [&](int64_t i, int c) { return static_cast<double>(bx[i * 4 + c]); };
  auto score = [&](int64_t i, int64_t k) { return static_cast<double>(sc[i * classes + k]); };
  const std::vector<int64_t> kept = select(p, count, classes, box, score);
  const int64_t rows = std::max(static_cast<int64_t>(kept.size()), min_rows);
  T* oc = ctx.allocate_output(0, confidence.dtype, {rows, classes}).template ptr<T>();
  T* ob = ctx.allocate_output(1, coordinates.dtype, {rows, 4}).template ptr<T>();
  std::fill(oc, oc + rows * classes, T(0));
  std::fill(ob, ob + rows * 4, T(0));
  for (size_t r = 0; r < kept.size(); ++r) {
    std::copy_n(sc + kept[r] * classes, classes, oc + static_cast<int64_t>(r) * classes);
    std::copy_n(bx + kept[r] * 4, 4, ob + static_cast<int64_t>(r) * 4);
  }
}

std::unique_ptr<Kernel> make_suppression_model(KernelBuilder& b) {
  const int confidence = b.input("confidence"), coordinates = b.input("coordinates");
  const int iou_input = b.optional_input("iou_threshold");
  const int confidence_input = b.optional_input("confidence_threshold");
  const double iou_default = b.const_float("default_iou_threshold");
  const double confidence_default = b.const_float("default_confidence_threshold");
  const bool per_class = b.const_bool("per_class");
  const int64_t min_rows = b.const_int("min_boxes"), max_rows = b.const_int("max_boxes");
  b.check(min_rows >= 0 && (max_rows < 0 || max_rows >= min_rows), "min_boxes ", min_rows, " and max_boxes ",
          max_rows, " bound no count");
  b.check(b.op().outputs.size() == 2, "expects 2 outputs, the op has ", b.op().outputs.size());
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& tc = ctx.input(confidence);
    const Tensor& tb = ctx.input(coordinates);
    if (tc.rank() != 2 || tb.rank() != 2 || tb.shape[1] != 4 || tb.shape[0] != tc.shape[0])
      ctx.fail("confidence ", shape_str(tc.shape), " and coordinates ", shape_str(tb.shape),
               " are not [boxes, classes] and [boxes, 4]");
    if (tc.dtype != tb.dtype || (tc.dtype != DType::Float32 && tc.dtype != DType::Float64))
      ctx.fail("confidence (", dtype_name(tc.dtype), ") and coordinates (", dtype_name(tb.dtype),
               ") must both be float32 or both double");
    NmsParams p;
    p.iou_threshold = iou_input < 0 ? iou_default : single_number(ctx, iou_input, "the IoU threshold");
    p.has_score_threshold = true;
    p.score_threshold =
        confidence_input < 0 ? confidence_default : single_number(ctx, confidence_input, "the confidence threshold");
    p.rule = ScoreRule::NotBelow;
    p.per_class = per_class;
    p.max_boxes = max_rows < 0 ? tc.shape[0] : max_rows;
    if (tc.dtype == DType::Float32) write_kept_rows<float>(p, min_rows, tc, tb, ctx);
    else write_kept_rows<double>(p, min_rows, tc, tb, ctx);
  });
}

}  // namespace

void register_detection_kernels(KernelRegistry& registry) {
  registry.add("non_maximum_suppression", kFloat, nms_factory(false), 15, 16);
  registry.add("non_maximum_suppression", kFloat, nms_factory(true), 17);
  registry.add("non_maximum_suppression_model", DTypeSet{DType::Float32, DType::Float64}, make_suppression_model);
}

}  // namespace coremlrt::ops

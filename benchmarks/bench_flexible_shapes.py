"""A flexible-size detector against its static-size twin, at the same input size.

Builds (in a temporary folder) a small single-shot detector from torch: five convolutions
(stride 2, then stride 1) ending in per-box class confidences [B, 3] and boxes [B, 4], converted
twice with coremltools: once for a fixed [1, 3, S, S] image and once with height and width
flexible (64 to 1024). Both are loaded with backend "auto" and predicted in interleaved rounds
on the same image; the median time of each and the ratio flexible / static are printed, for
fp32 and fp16 programs. The goal is a ratio of at most 1.2 (docs/design/detection.md): regions
over dims known only at prediction run on OpenVINO as the static twin's do
(src/backends/openvino/lowering.h, any_dims).

    python3 benchmarks/bench_flexible_shapes.py [--size 256] [--rounds 40]
"""

import argparse
import os
import statistics
import tempfile
import time
import warnings

import numpy as np


def detector():
    import torch

    class Detector(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            widths = [3, 16, 32, 64, 64]
            self.body = torch.nn.Sequential(*[layer for i in range(4) for layer in (
                torch.nn.Conv2d(widths[i], widths[i + 1], 3, stride=2 if i < 3 else 1, padding=1), torch.nn.ReLU())])
            self.head = torch.nn.Conv2d(64, 7, 1)

        def forward(self, image):
            t = self.head(self.body(image)).flatten(2)[0].transpose(0, 1)  # [B, 7]
            return torch.sigmoid(t[:, :3]), torch.sigmoid(t[:, 3:])

    return Detector().eval()


def convert(size, flexible, fp16, path):
    import coremltools as ct
    import torch

    side = ct.RangeDim(64, 1024, default=size) if flexible else size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(torch.jit.trace(detector(), torch.zeros(1, 3, size, size)),
                           inputs=[ct.TensorType(name="image", shape=(1, 3, side, side))],
                           outputs=[ct.TensorType(name="confidence"), ct.TensorType(name="coordinates")],
                           compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
                           minimum_deployment_target=ct.target.iOS16)
    model.save(path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="image height and width")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    import coremlrt

    image = {"image": np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32)}
    with tempfile.TemporaryDirectory() as directory:
        for fp16 in (False, True):
            precision = "fp16" if fp16 else "fp32"
            static = coremlrt.MLModel(convert(args.size, False, fp16, os.path.join(directory, f"static_{precision}.mlpackage")))
            flexible = coremlrt.MLModel(convert(args.size, True, fp16, os.path.join(directory, f"flexible_{precision}.mlpackage")))
            for model in (static, flexible):
                model.predict(image)  # first call: buffers and OpenVINO's shape inference
            a, b = static.predict(image), flexible.predict(image)
            difference = max(float(np.abs(a[k] - b[k]).max()) for k in a)
            times = {"static": [], "flexible": []}
            for _ in range(args.rounds):
                for name, model in (("static", static), ("flexible", flexible)):
                    start = time.perf_counter()
                    model.predict(image)
                    times[name].append(time.perf_counter() - start)
            s, f = statistics.median(times["static"]), statistics.median(times["flexible"])
            backends = sorted({p["backend"] for p in flexible.placements() if p["op_type"] == "conv"})
            print(f"{precision} {args.size}x{args.size}: static {s * 1e3:.2f} ms, flexible {f * 1e3:.2f} ms, "
                  f"ratio {f / s:.2f} (goal <= 1.2); flexible convs on {', '.join(backends)}; "
                  f"largest difference {difference:.2g}")


if __name__ == "__main__":
    main()

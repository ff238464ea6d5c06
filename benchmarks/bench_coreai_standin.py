"""The same Core AI user code with coreai-core's runtime and with coremlrt's stand-in for it
(COREMLRT_COREAI, docs/design/coreai-runtime-standin.md): mean time of ``await function(inputs)``
after a warm-up, for an MLP and a CNN converted with coreai-torch (as in
tests/python/coreai/test_coreai_standin.py). Needs torch, coreai-core and coreai-torch.

    python3 benchmarks/bench_coreai_standin.py [--calls 500] [--repeat 3]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "coremlrt_coreai_hook.py")

# What COREMLRT_COREAI=1 does through coremlrt_coreai.pth, done from the source tree.
SWITCH = f"""
import importlib.util, sys
sys.path.append({os.path.dirname(HOOK)!r})  # the hook's finder (coremlrt_import_hook.py), beside it
spec = importlib.util.spec_from_file_location("coremlrt_coreai_hook", {HOOK!r})
hook = importlib.util.module_from_spec(spec); spec.loader.exec_module(hook)
sys.modules["coremlrt_coreai_hook"] = hook; hook.install()
"""

USER_CODE = """
import asyncio, sys, time
import numpy as np
from coreai.authoring import AIModelAsset
from coreai.runtime import NDArray

async def main(path, shapes, calls):
    async with AIModelAsset.load(path).executable() as model:
        function = model.load_function("main")
        rng = np.random.default_rng(0)
        inputs = {n: NDArray(rng.standard_normal(s, dtype=np.float32)) for n, s in shapes.items()}
        for _ in range(20):
            await function(inputs)
        start = time.perf_counter()
        for _ in range(calls):
            await function(inputs)
        return (time.perf_counter() - start) / calls

path, shapes, calls = sys.argv[1], eval(sys.argv[2]), int(sys.argv[3])
print(asyncio.run(main(path, shapes, calls)))
"""


def convert(module, args, names, path):
    import warnings

    import coreai_torch
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
        converter.add_pytorch_module(module.eval(), input_names=names, output_names=["out"], export_fn=lambda m: (
            torch.export.export(m, args=args).run_decompositions(coreai_torch.get_decomp_table())))
        converter.to_coreai().save_asset(path)
    return {n: tuple(a.shape) for n, a in zip(names, args)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import torch

    nn, F = torch.nn, torch.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

        def forward(self, x, y):
            return torch.softmax(self.l2(torch.relu(self.l1(x))) + y, -1)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(128, 10)

        def forward(self, x):
            h = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, (4, 4)), 1))

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        from pathlib import Path
        models = {"mlp": convert(MLP(), (torch.randn(2, 8), torch.randn(2, 4)), ["x", "y"], Path(root, "mlp.aimodel")),
                  "cnn": convert(CNN(), (torch.randn(1, 3, 16, 16),), ["image"], Path(root, "cnn.aimodel"))}
        env = {k: v for k, v in os.environ.items() if k != "COREMLRT_COREAI"}
        for name, shapes in models.items():
            times = ([], [])
            for _ in range(args.repeat):  # alternated, so that both sides see the same machine load
                for side, code in enumerate((USER_CODE, SWITCH + USER_CODE)):
                    run = subprocess.run([sys.executable, "-c", code, str(Path(root, name + ".aimodel")), repr(shapes),
                                          str(args.calls)], env=env, capture_output=True, text=True)
                    if run.returncode:
                        raise SystemExit(f"{name} ({('coreai runtime', 'stand-in')[side]}) failed:\n{run.stderr}")
                    times[side].append(float(run.stdout.split()[-1]))
            apple, ours = (statistics.median(t) for t in times)
            print(f"{name}: coreai runtime {apple * 1e6:.0f} us, coremlrt stand-in {ours * 1e6:.0f} us, "
                  f"{apple / ours:.1f}x (median over {args.repeat} runs of the mean of {args.calls} calls after 20)")


if __name__ == "__main__":
    main()

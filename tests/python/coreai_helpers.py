"""Core AI models for the tests of tests/python/coreai: a torch module converted with
coreai-torch and saved as an .aimodel folder. Callers skip first when coreai-core or
coreai-torch is missing (this module imports them only when called)."""

import pathlib
import warnings


def convert(module, args, names, outputs, path, states=None):
    """Saves `module` (called with `args`) as the .aimodel `path` with the given input and output
    names (and state names: buffers the module updates in place); returns the path as a string."""
    import coreai_torch
    import torch

    export = lambda m: torch.export.export(m, args=args).run_decompositions(coreai_torch.get_decomp_table())  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # coreai-torch warns about torch versions newer than it was tested with
        converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
        extra = {"state_names": states} if states else {}
        converter.add_pytorch_module(module, export_fn=export, input_names=names, output_names=outputs, **extra)
        converter.to_coreai().save_asset(pathlib.Path(path))
    return str(path)


def author(path, inputs, body):
    """Saves a one-graph program written with coreai's authoring API as the .aimodel `path`:
    `inputs` is a list of (shape, numpy dtype), named x0, x1, ...; `body` takes their values and
    returns one value or a list of them, named y0, y1, ... The graph is built as the authoring
    API's deferred graphs are (graph_builder.GraphOp, its result types from the body's values)."""
    from coreai.authoring import AIProgram, Module, TensorType, Value
    from coreai.authoring.graph_builder import GraphOp

    module = Module.create()
    with module:
        graph = GraphOp("main", input_types=[TensorType(s, d)._to_mlir_type() for s, d in inputs], result_types=[],
                        input_names=[f"x{i}" for i in range(len(inputs))], result_names=[])
        with graph.block:
            outputs = body(*[Value._from_mlir(a) for a in graph.arguments])
            outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            graph.outputs_spec = [(f"y{i}", o._to_mlir() if isinstance(o, Value) else o)
                                  for i, o in enumerate(outputs)]
    AIProgram(module).save_asset(pathlib.Path(path))
    return str(path)


def coreai_predict(path, feeds, function="main", states=None):
    """One prediction of coreai-core's own runtime (coreai.runtime) on the .aimodel `path`: the
    reference the translation is compared with, computed in a process of its own
    (tests/python/coreai_oracle.py). `states`: {name: numpy array}, updated in place with the
    states' values after the prediction."""
    import coreai_oracle

    outputs, after = coreai_oracle.call("reference_predict", str(path), feeds, function, states)
    for k, v in after.items():
        states[k][...] = v
    return outputs

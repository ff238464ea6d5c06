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

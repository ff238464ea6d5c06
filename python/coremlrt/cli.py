"""The ``coremlrt`` command.

    coremlrt info MODEL [--plan]
    coremlrt ops
    coremlrt predict MODEL --input NAME=FILE.npy [--input ...] [--inputs FILE.npz]
                           [--function NAME] [--output OUT.npz]
    coremlrt batch MODEL --inputs DATA --output OUT [--threads N] [--fail-fast] [--resume]
                         [--format npz|parquet] [--function NAME] [--no-progress]
    coremlrt serve MODEL_OR_FOLDER [--port N] [--grpc-port N] [--metrics-port N] [--workers N]
                   [--max-batch N] [--max-wait-ms MS] [--max-queue N] [--max-request-bytes N]
                   [--max-sequences N] [--sequence-timeout S] [--no-merge] [--host HOST] [--tokenizer PATH]
    coremlrt generate MODEL (--prompt TEXT | --prompt-ids IDS) [--tokenizer PATH] [--max-new-tokens N]
                      [--temperature T] [--top-k K] [--top-p P] [--repetition-penalty R] [--seed S]
                      [--stop TEXT ...] [--ignore-eos] [--ids]
    coremlrt score MODEL TEXT_FILE [--tokenizer PATH] [--window N] [--stride N] [--json]
    coremlrt export MODEL -o OUT.onnx [--function NAME] [--opset N] [--fp32] [--external-data]
    coremlrt export MODEL -o DIR --all-functions [--opset N] [--fp32]
    coremlrt export --check MODEL [--function NAME | --all-functions] [--opset N]
"""

import argparse
import os
import sys

import numpy as np

from . import _core, compute_plan, ops_table
from .batch import predict_dataset
from .model import Error, MLModel


def _print_features(title, features, out):
    print(f"    {title}:", file=out)
    if not features:
        print("      (none)", file=out)
    for f in features:
        line = f"      {f['name']}: {f['type']}"
        if f["short_description"]:
            line += f"  -- {f['short_description']}"
        print(line, file=out)


def cmd_info(args, out=None):
    out = out or sys.stdout  # looked up per call: tests and callers may replace sys.stdout
    report = _core.inspect(args.model)
    desc = report["description"]
    meta = desc["metadata"]
    print(f"model: {args.model}", file=out)
    print(f"  type: {desc['model_type']}, specification version {desc['specification_version']}", file=out)
    for key in ("author", "license", "short_description", "version"):
        if meta[key]:
            print(f"  {key}: {meta[key]}", file=out)
    for key, value in sorted(meta["user_defined"].items()):
        print(f"  metadata {key}: {value}", file=out)
    print(f"  weights: {report['weight_bytes']} bytes", file=out)
    opsets = {f["name"]: f for f in report["functions"]}
    print(f"  functions ({len(desc['functions'])}):", file=out)
    unsupported_total = 0
    # A neuralNetwork model is described by its layers, in the file's own vocabulary.
    unit = "layer" if desc["model_family"] == "neuralNetwork" else "op"
    for function in desc["functions"]:
        default = " (default)" if function["name"] == desc["default_function"] else ""
        program = opsets.get(function["name"], {})
        opset = f", opset {program['opset']}" if program.get("opset") else ""
        print(f"  - {function['name']}{default}{opset}", file=out)
        _print_features("inputs", function["inputs"], out)
        _print_features("outputs", function["outputs"], out)
        _print_features("states", function["states"], out)
        if program:
            counts = program["op_counts"]
            print(f"    {unit}s ({sum(counts.values())}): " +
                  ", ".join(f"{op} x{n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                  file=out)
            unsupported = program["unsupported"]
            unsupported_total += len(unsupported)
            if unsupported:
                print(f"    unsupported by this build ({len(unsupported)}):", file=out)
                for u in unsupported:
                    reason = f": {u['reason']}" if u["reason"] else ""
                    print(f"      {u['op_type']} ({unit} '{u['op_name']}', output '{u['output']}'){reason}", file=out)
    if report["problem"]:
        print(f"  unsupported: {report['problem']}", file=out)
    elif unsupported_total == 0:
        print(f"  every {unit} is supported by this build", file=out)
    if args.plan and not report["problem"] and unsupported_total == 0:
        _print_plan(args, desc, out)
    return 0


def _print_plan(args, desc, out):
    """Per op: device, backend (and region), estimated cost, and why an op fell back to
    coremlrt's own kernels (coremlrt/compute_plan.py says how cost is estimated)."""
    if desc["model_family"] != "mlProgram":
        print(f"  compute plan: every layer of this {desc['model_type']} model runs on the CPU, on coremlrt's "
              f"own kernels", file=out)
        return
    for function, ops in compute_plan.compute_plan(args.model, backend=args.backend).items():
        counts = {}
        for op in ops:
            if op.op_type != "const":
                counts[op.backend] = counts.get(op.backend, 0) + 1
        summary = ", ".join(f"{backend} {n}" for backend, n in sorted(counts.items()))
        print(f"  compute plan of '{function}' (backend={args.backend or 'auto'}): {summary}", file=out)
        print("    (position, op, output, device, backend, estimated FLOPs, share of the function)", file=out)
        for op in ops:
            if op.op_type == "const":
                continue
            where = ".".join(str(i) for i in op.path)
            label = op.outputs[0] if op.outputs else op.name
            backend = op.backend + (f" region #{op.region}" if op.region >= 0 else "")
            reason = f"  ({op.reason})" if op.reason else ""
            print(f"    {where:>6} {op.op_type:<24} {label:<30} {op.device:<4} {backend:<18} "
                  f"{op.flops:>14,d} {op.weight:7.2%}{reason}", file=out)


def cmd_ops(args, out=None):
    out = out or sys.stdout  # looked up per call: tests and callers may replace sys.stdout
    rows = [("op", "opsets", "dtypes")] + ops_table.rows()
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for op, opsets, dtypes in rows:
        print(f"{op:<{widths[0]}}  {opsets:<{widths[1]}}  {dtypes}", file=out)
    return 0


def _parse_inputs(args):
    inputs = {}
    if args.inputs:
        with np.load(args.inputs) as npz:
            inputs.update({name: npz[name] for name in npz.files})
    for item in args.input or []:
        if "=" not in item:
            raise Error(f"--input takes NAME=FILE.npy, got '{item}'")
        name, path = item.split("=", 1)
        inputs[name] = np.load(path)
    return inputs


def cmd_predict(args, out=None):
    out = out or sys.stdout  # looked up per call: tests and callers may replace sys.stdout
    model = MLModel(args.model, function_name=args.function, backend=args.backend, threads=args.threads)
    outputs = model.predict(_parse_inputs(args))
    if args.output:
        # A classifier's {label: probability} dict is saved as its probabilities in class
        # order (the corpus layout); its label (int or str) saves as a 0-d array.
        arrays = {name: np.array(list(value.values())) if isinstance(value, dict) else value
                  for name, value in outputs.items()}
        np.savez(args.output, **arrays)
        print(f"wrote {len(outputs)} output(s) to {args.output}", file=out)
    for name, value in outputs.items():
        if not isinstance(value, np.ndarray):  # a classifier's label or probability dict
            print(f"{name}: {type(value).__name__}", file=out)
            print(repr(value), file=out)
            continue
        print(f"{name}: {value.dtype} {list(value.shape)}", file=out)
        print(np.array2string(value, threshold=20, edgeitems=3, precision=5), file=out)
    return 0


def cmd_batch(args, out=None):
    out = out or sys.stdout  # looked up per call: tests and callers may replace sys.stdout
    result = predict_dataset(args.model, args.inputs, args.output, threads=args.threads,
                             fail_fast=args.fail_fast, resume=args.resume, output_format=args.format,
                             progress=not args.no_progress, function_name=args.function)
    skipped = f", {result.skipped} already written" if result.skipped else ""
    print(f"{result.written} record(s) written, {result.failed} failed{skipped} in {result.seconds:.2f} s "
          f"({result.throughput:.1f} records/s) to {args.output}", file=out)
    for index, source, message in result.errors[:10]:
        print(f"  record {index} ({source}): {message}", file=out)
    if result.failed > 10:
        print(f"  ... {result.failed - 10} more in {args.output}/_errors.jsonl", file=out)
    return 0 if result.failed == 0 else 2


def cmd_serve(args, out=None):
    from .serve import ServeConfig
    from .serve.server import main as serve_main

    config = ServeConfig(host=args.host, http_port=args.port, grpc_port=args.grpc_port,
                         metrics_port=args.metrics_port, workers=args.workers, max_batch=args.max_batch,
                         max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                         max_request_bytes=args.max_request_bytes, max_sequences=args.max_sequences,
                         sequence_timeout_s=args.sequence_timeout, merge=not args.no_merge, backend=args.backend,
                         threads=args.threads, log_format=args.log_format,
                         admin_token=args.admin_token or os.environ.get("COREMLRT_ADMIN_TOKEN") or None,
                         tokenizer=args.tokenizer)
    from .serve.openai_routes import openai_routes

    return serve_main(args.model, config, extra_routes=[openai_routes(args.model, config)])


def cmd_export(args, out=None):
    """Writes the ONNX export, or with --check lists the ops that stop one (exit status 2)."""
    from . import onnx_export

    out = out or sys.stdout
    if args.all_functions and args.function:
        raise ValueError("export takes --function NAME or --all-functions, not both")
    if args.check:
        if args.all_functions:
            problems = [(function, problem) for function, found in
                        onnx_export.unsupported_ops_by_function(args.model, args.opset).items() for problem in found]
        else:
            problems = [(None, p) for p in onnx_export.unsupported_ops(args.model, args.function, args.opset)]
        for function, (op_type, output, reason) in problems:
            where = f"function '{function}': " if function is not None else ""
            print(f"{where}{op_type} producing '{output}': {reason}", file=out)
        if not problems:
            print("every op has an ONNX form", file=out)
        return 2 if problems else 0
    if not args.output:
        raise ValueError("export needs -o OUT.onnx, -o DIR with --all-functions, or --check")
    if args.all_functions:
        if args.external_data:
            raise ValueError(f"--all-functions always writes the weights to DIR/{onnx_export.SHARED_DATA_FILE}; "
                             f"--external-data is for one function's export")
        paths = onnx_export.export_onnx_functions(args.model, args.output, opset=args.opset, fp32=args.fp32)
        for path in paths.values():
            print(f"wrote {path}", file=out)
        print(f"wrote {os.path.join(args.output, onnx_export.SHARED_DATA_FILE)} (the weights of every function)",
              file=out)
        return 0
    path = onnx_export.export_onnx(args.model, args.output, function=args.function, opset=args.opset,
                                   fp32=args.fp32, external_data=True if args.external_data else None)
    print(f"wrote {path}", file=out)
    return 0


def _add_export_parser(sub):
    from .onnx_export import DEFAULT_OPSET

    export = sub.add_parser("export", help="export a model to ONNX (needs the onnx package)",
                            description="Exit status: 0 when written (or, with --check, when every op has an "
                                        "ONNX form), 2 when --check lists ops without one, 1 on an error.")
    export.add_argument("model")
    export.add_argument("-o", "--output", metavar="OUT.onnx",
                        help="where to write the ONNX model (with --all-functions: the directory)")
    export.add_argument("--check", action="store_true", help="list the ops that have no ONNX form; write nothing")
    export.add_argument("--function", default=None, help="function of a multifunction model (default: its default)")
    export.add_argument("--all-functions", action="store_true",
                        help="every function of a multifunction model: DIR/<function>.onnx each, and their "
                             "weights once in DIR/weights.data (the weights the functions share stored once)")
    export.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    export.add_argument("--fp32", action="store_true", help="write fp16 programs with fp32 types")
    export.add_argument("--external-data", action="store_true",
                        help="weights in OUT.onnx.data (default: only when they pass 1 GiB)")


def _add_serve_parser(sub):
    from .serve.config import ServeConfig  # no server import: `coremlrt --help` works without grpcio

    defaults = ServeConfig()
    serve = sub.add_parser("serve", help="serve models over the Open Inference Protocol (REST and gRPC)",
                           description="Serves one model, or each model in a folder (named after its file), "
                                       "over the Open Inference Protocol (KServe V2 / Triton), REST and gRPC. "
                                       "docs/design/serving.md describes batching, sequences and limits.")
    serve.add_argument("model", metavar="MODEL_OR_FOLDER")
    serve.add_argument("--host", default=defaults.host, help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=defaults.http_port, help="REST port")
    serve.add_argument("--grpc-port", type=int, default=defaults.grpc_port, help="gRPC port")
    serve.add_argument("--metrics-port", type=int, default=defaults.metrics_port, help="Prometheus /metrics port")
    serve.add_argument("--workers", type=int, default=defaults.workers,
                       help="predictions per model at once, side by side (threads in this process)")
    serve.add_argument("--max-batch", type=int, default=defaults.max_batch,
                       help="requests merged into one prediction at most (models with a flexible batch dimension)")
    serve.add_argument("--max-wait-ms", type=float, default=defaults.max_wait_ms,
                       help="how long a batch's first request waits for more (default 0: batch what is queued)")
    serve.add_argument("--max-queue", type=int, default=defaults.max_queue,
                       help="requests per model waiting for a worker; past it: 503 with Retry-After")
    serve.add_argument("--max-request-bytes", type=int, default=defaults.max_request_bytes,
                       help="largest REST body / gRPC message (413 / RESOURCE_EXHAUSTED past it)")
    serve.add_argument("--max-sequences", type=int, default=defaults.max_sequences,
                       help="live stateful sequences per model")
    serve.add_argument("--sequence-timeout", type=float, default=defaults.sequence_timeout_s,
                       help="seconds after which an idle sequence is dropped (default %(default)s, as Triton)")
    serve.add_argument("--no-merge", action="store_true", help="never merge requests; run them side by side")
    serve.add_argument("--backend", default=None, help="auto (default), reference or a backend name")
    serve.add_argument("--threads", type=int, default=None, help="threads per prediction (default: every core)")
    serve.add_argument("--log-format", choices=["json", "text"], default=defaults.log_format)
    serve.add_argument("--admin-token", default=None,
                       help="turn on model control (repository load/unload), for requests that carry "
                            "'Authorization: Bearer TOKEN' (default: off); also read from COREMLRT_ADMIN_TOKEN")
    serve.add_argument("--tokenizer", default=None, metavar="PATH",
                       help="tokenizer folder (tokenizer.json) of the language models served under the OpenAI API "
                            "(default: each model's folder); --max-sequences bounds their concurrent requests")


# The exit status of a failed command, by the kind of the engine error that stopped it
# (docs/guide/command-line.md, "Exit status"); 1 for a bad input, option or file and any other
# error; 2 is argparse's for a wrong command line and a command's partial failure (batch,
# export --check).
EXIT_STATUS = {"bad_input": 1, "bad_model": 3, "unsupported": 4, "resource_limit": 5, "internal": 6}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="coremlrt", description="Run Core ML models on Linux.")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="describe a model: features, functions, ops, unsupported ops")
    info.add_argument("model")
    info.add_argument("--plan", action="store_true",
                      help="also load the model and print each op's device, backend, estimated cost, and why an "
                           "op fell back to coremlrt's own kernels")
    info.add_argument("--backend", default=None, help="backend for --plan: auto (default), reference or a backend name")
    sub.add_parser("ops", help="list the ops this build has kernels for: opsets and dtypes")
    predict = sub.add_parser("predict", help="run a prediction on .npy/.npz inputs")
    predict.add_argument("model")
    predict.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="one input array (repeatable)")
    predict.add_argument("--inputs", metavar="FILE.npz", help="every array of an .npz file, by name")
    predict.add_argument("--function", default=None, help="function of a multifunction model")
    predict.add_argument("--output", metavar="OUT.npz", help="write the outputs to this .npz file")
    predict.add_argument("--backend", default="auto", help="auto (default), reference or a backend name "
                         "(coremlrt.available_backends())")
    predict.add_argument("--threads", type=int, default=None, help="threads per prediction (default: every core)")
    batch = sub.add_parser("batch", help="predict every record of a dataset, writing outputs as they come",
                           description="Exit status: 0 when every record was written, 2 when some failed "
                                       "(listed in OUT/_errors.jsonl), 1 on an error that stops the run.")
    batch.add_argument("model")
    batch.add_argument("--inputs", required=True, metavar="DATA",
                       help="a folder of .npz/.npy files (one record each) or a Parquet file or folder "
                            "(one column per input)")
    batch.add_argument("--output", required=True, metavar="OUT",
                       help="folder for the prediction shards and _errors.jsonl")
    batch.add_argument("--threads", type=int, default=None, help="predictions at once (default: one per core)")
    batch.add_argument("--fail-fast", action="store_true", help="stop at the first record that fails")
    batch.add_argument("--resume", action="store_true", help="continue a run: skip the records OUT holds")
    batch.add_argument("--format", choices=["npz", "parquet"], default=None,
                       help="shard format (default: parquet when OUT ends in .parquet, else npz)")
    batch.add_argument("--function", default=None, help="function of a multifunction model")
    batch.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_serve_parser(sub)
    _add_export_parser(sub)
    from .llm import cli as llm_cli

    llm_cli.add_parsers(sub)
    args = parser.parse_args(argv)
    try:
        model = getattr(args, "model", None)
        if model and os.fspath(model).rstrip("/" + os.sep).endswith(".aimodel"):
            # A Core AI model: every command reads the ML program it translates to (coremlrt.coreai).
            from .coreai.compiler import compile_aimodel
            args.model = compile_aimodel(model)
        return {"info": cmd_info, "ops": cmd_ops, "predict": cmd_predict, "batch": cmd_batch, "serve": cmd_serve,
                "export": cmd_export, "generate": llm_cli.cmd_generate, "score": llm_cli.cmd_score}[args.command](args)
    except (Error, OSError, ValueError, ImportError) as exc:
        print(f"coremlrt: error: {exc}", file=sys.stderr)
        return EXIT_STATUS.get(getattr(exc, "kind", None), 1)


if __name__ == "__main__":
    sys.exit(main())

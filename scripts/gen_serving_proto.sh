#!/usr/bin/env bash
# Regenerates python/coremlrt/serve/protocol/grpc_inference_pb2.py from grpc_inference.proto
# beside it (protoc from Debian's protobuf-compiler, which scripts/setup.sh installs). The
# generated module is committed, so that serving needs no protoc at run time.
set -euo pipefail
cd "$(dirname "$0")/../python/coremlrt/serve/protocol"
protoc --python_out=. grpc_inference.proto

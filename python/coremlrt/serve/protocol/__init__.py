"""The gRPC messages of the Open Inference Protocol (grpc_inference.proto; grpc_inference_pb2.py is generated from it)."""

# Type stub for the module protoc generated from grpc_inference.proto. protoc builds the
# message classes at import time from a serialized descriptor, so no static checker can see
# them; every name is typed Any here and checked by the protocol tests instead
# (tests/python/serving/test_protocol.py).
from typing import Any

DESCRIPTOR: Any

def __getattr__(name: str) -> Any: ...

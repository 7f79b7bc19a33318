"""A protoc plugin (for `buf generate`) that writes grpcio stubs (`*_pb2_grpc.py`).

grpcio-tools builds its gRPC generator into its own protoc (`python -m grpc_tools.protoc
--grpc_python_out`) rather than shipping a `protoc-gen-grpc_python` executable, and buf can only
use protoc's built-in generators (python, pyi), not grpcio-tools' one. This plugin bridges them:
it reads the CodeGeneratorRequest buf sends on stdin, hands the request's files to grpcio-tools'
protoc as a descriptor set, and answers with what protoc wrote.

Run it with the interpreter that has grpcio-tools (buf.gen.yaml:
`local: [clients/python/.venv/bin/python, clients/python/protoc_gen_grpc_python.py]`).
"""

import os
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def main() -> int:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    response = plugin_pb2.CodeGeneratorResponse()
    response.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory(prefix="protoc-gen-grpc_python-") as scratch:
        descriptors = os.path.join(scratch, "request.binpb")
        with open(descriptors, "wb") as out:
            out.write(descriptor_pb2.FileDescriptorSet(file=request.proto_file).SerializeToString())
        generated = os.path.join(scratch, "out")
        os.mkdir(generated)
        out_flag = f"--grpc_python_out={request.parameter}:{generated}" if request.parameter else f"--grpc_python_out={generated}"
        code = protoc.main(
            ["grpc_tools.protoc", f"--descriptor_set_in={descriptors}", out_flag, *request.file_to_generate]
        )
        if code != 0:
            response.error = f"grpc_tools.protoc exited with {code}"
        else:
            for root, _, names in os.walk(generated):
                for name in sorted(names):
                    path = os.path.join(root, name)
                    with open(path, encoding="utf-8") as source:
                        response.file.add(name=os.path.relpath(path, generated), content=source.read())
    sys.stdout.buffer.write(response.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())

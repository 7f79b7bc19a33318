"""A minimal hand-written fake of the Sandbox API with grpcio, the baseline of the lifecycle
benchmark (`benches/python-lifecycle`): CreateSandbox, GetSandbox and DeleteSandbox keep a dict,
StreamExec answers `hostname` with a fixed name. ConnectSandbox is left UNIMPLEMENTED (the client
then uses the gateway, as with the emulator). No scheduling, no processes, no auth: the least a
fake can do for the published client's create → exec → delete to pass.

Usage: python python_grpc_fake.py PORT_FILE  (binds 127.0.0.1:0, writes the port, serves)
"""

import sys
import uuid
from concurrent import futures

import grpc
from cwsandbox._proto import sandbox_pb2 as pb
from cwsandbox._proto import sandbox_pb2_grpc as rpc


class FakeSandboxes(rpc.SandboxServiceServicer):
    def __init__(self):
        self.states = {}

    def _sandbox(self, sandbox_id):
        return pb.Sandbox(sandbox_id=sandbox_id, status=pb.SandboxStatus(state=self.states[sandbox_id]))

    def CreateSandbox(self, request, context):
        sandbox_id = uuid.uuid4().hex[:16]
        self.states[sandbox_id] = pb.STATE_RUNNING
        return self._sandbox(sandbox_id)

    def GetSandbox(self, request, context):
        if request.sandbox_id not in self.states:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such sandbox")
        return self._sandbox(request.sandbox_id)

    def DeleteSandbox(self, request, context):
        if request.sandbox_id not in self.states:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such sandbox")
        self.states[request.sandbox_id] = pb.STATE_COMPLETED
        return pb.DeleteSandboxResponse(sandbox=self._sandbox(request.sandbox_id))

    def StreamExec(self, request_iterator, context):
        first = next(request_iterator)
        yield pb.ExecStreamResponse(ready=pb.ExecStreamReady())
        name = f"sandbox-{first.init.sandbox_id}\n".encode()
        yield pb.ExecStreamResponse(output=pb.ExecStreamOutput(stream=pb.ExecStreamOutput.STREAM_STDOUT, data=name))
        yield pb.ExecStreamResponse(exit=pb.ExecStreamExit(exit_code=0))


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    rpc.add_SandboxServiceServicer_to_server(FakeSandboxes(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(sys.argv[1], "w") as f:
        f.write(str(port))
    server.wait_for_termination()


if __name__ == "__main__":
    main()

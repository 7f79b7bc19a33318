"""A minimal hand-written fake of the Sandbox API with grpcio, the baseline of the lifecycle
benchmark (`benches/python-lifecycle`): CreateSandbox, GetSandbox and DeleteSandbox keep a dict,
StreamExec answers `hostname` with a fixed name. No scheduling, no processes, no auth: the least a
fake can do for the published client's create → exec → delete to pass.

Without `--direct`, ConnectSandbox is UNIMPLEMENTED: the client's default (`auto`) then falls back
to the gateway after one round trip. With `--direct` the fake also has the least direct data plane
the client accepts: ConnectSandbox signs the client's CSR with a CA made at start (no checks), and a
second grpcio server on another loopback port requires a certificate of that CA and answers
StreamExec as the gateway does. It is the floor of the direct path: what the client itself spends
on a key, a CSR, a new mutual-TLS channel and its handshake, whatever the server.

Usage: python python_grpc_fake.py PORT_FILE [--direct]  (binds 127.0.0.1:0, writes the port, serves)
"""

import datetime
import sys
import uuid
from concurrent import futures

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cwsandbox._proto import sandbox_data_plane_pb2_grpc as data_rpc
from cwsandbox._proto import sandbox_pb2 as pb
from cwsandbox._proto import sandbox_pb2_grpc as rpc


def exec_hostname(request_iterator):
    first = next(request_iterator)
    yield pb.ExecStreamResponse(ready=pb.ExecStreamReady())
    name = f"sandbox-{first.init.sandbox_id}\n".encode()
    yield pb.ExecStreamResponse(output=pb.ExecStreamOutput(stream=pb.ExecStreamOutput.STREAM_STDOUT, data=name))
    yield pb.ExecStreamResponse(exit=pb.ExecStreamExit(exit_code=0))


class Authority:
    """A CA and the direct endpoint's server certificate, both made at start."""

    def __init__(self):
        now = datetime.datetime.now(datetime.timezone.utc)
        self.now = now
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake direct data plane CA")])
        self.certificate = (
            self._builder(name, self.key.public_key(), now)
            .issuer_name(name)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        self.server_key = ec.generate_private_key(ec.SECP256R1())
        server = (
            self._builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake direct")]), self.server_key.public_key(), now)
            .issuer_name(self.certificate.subject)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.server_pem = server.public_bytes(serialization.Encoding.PEM)
        self.server_key_pem = self.server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @staticmethod
    def _builder(subject, public_key, now):
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(minutes=10))
        )

    def sign(self, csr_der, sandbox_id):
        csr = x509.load_der_x509_csr(csr_der)
        now = datetime.datetime.now(datetime.timezone.utc)
        leaf = (
            self._builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sandbox {sandbox_id}")]), csr.public_key(), now)
            .issuer_name(self.certificate.subject)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return leaf.public_bytes(serialization.Encoding.PEM) + self.ca_pem, now + datetime.timedelta(minutes=10)


class FakeSandboxes(rpc.SandboxServiceServicer):
    def __init__(self, authority=None, direct_port=None):
        self.states = {}
        self.authority = authority
        self.direct_port = direct_port

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
        yield from exec_hostname(request_iterator)

    def ConnectSandbox(self, request, context):
        if self.authority is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no direct data plane")
        chain, expires = self.authority.sign(request.csr_der, request.sandbox_id)
        connection = pb.SandboxConnection(
            endpoint_uri=f"https://127.0.0.1:{self.direct_port}",
            client_certificate_chain_pem=chain,
            server_ca_bundle_pem=self.authority.ca_pem,
            endpoint_id="fake-direct",
            transport=pb.SANDBOX_DATA_TRANSPORT_DIRECT_MTLS,
            protocol=pb.SANDBOX_DATA_PROTOCOL_CONNECT_H2_V1,
            granted_permissions=list(request.requested_permissions),
        )
        connection.expires_at.FromDatetime(expires)
        return connection


class FakeDataPlane(data_rpc.SandboxDataPlaneServiceServicer):
    def StreamExec(self, request_iterator, context):
        yield from exec_hostname(request_iterator)


def main():
    direct = "--direct" in sys.argv[2:]
    authority = Authority() if direct else None
    direct_port = None
    if direct:
        data_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        data_rpc.add_SandboxDataPlaneServiceServicer_to_server(FakeDataPlane(), data_server)
        credentials = grpc.ssl_server_credentials(
            [(authority.server_key_pem, authority.server_pem + authority.ca_pem)],
            root_certificates=authority.ca_pem,
            require_client_auth=True,
        )
        direct_port = data_server.add_secure_port("127.0.0.1:0", credentials)
        data_server.start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    rpc.add_SandboxServiceServicer_to_server(FakeSandboxes(authority, direct_port), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(sys.argv[1], "w") as f:
        f.write(str(port))
    server.wait_for_termination()


if __name__ == "__main__":
    main()

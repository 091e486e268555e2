"""TLS on the gRPC port (--grpc-use-ssl, --grpc-use-ssl-mutual), with a
CA, a server and a client certificate the test makes with the openssl
command-line tool; Triton's simple_grpc_infer_client.py flow over each."""

import shutil
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

import harness

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=osprey-test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    for who, cn in (("server", "localhost"), ("client", "osprey-client")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                "-keyout", f"{who}.key", "-out", f"{who}.csr", cwd=d)
        (d / f"{who}.ext").write_text(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n" if who == "server"
            else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{who}.ext",
                "-out", f"{who}.pem", cwd=d)
    return d


def infer_simple(c):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    ins = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
           grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(c.infer("simple", ins).as_numpy("OUTPUT0"), 2 * a)


def test_server_tls(start_server, example_repo_copy, certs):
    srv = start_server(example_repo_copy, [
        "--grpc-use-ssl=true", f"--grpc-server-cert={certs / 'server.pem'}",
        f"--grpc-server-key={certs / 'server.key'}"])
    url = f"localhost:{srv.grpc_port}"
    with grpcclient.InferenceServerClient(
            url, ssl=True, root_certificates=str(certs / "ca.pem")) as c:
        assert c.is_server_live()
        infer_simple(c)
    # A plaintext client cannot talk to it.
    with grpcclient.InferenceServerClient(url) as c:
        with pytest.raises(InferenceServerException):
            c.is_server_live(client_timeout=5)


def test_mutual_tls(start_server, example_repo_copy, certs):
    srv = start_server(example_repo_copy, [
        "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={certs / 'server.pem'}",
        f"--grpc-server-key={certs / 'server.key'}", f"--grpc-root-cert={certs / 'ca.pem'}"])
    url = f"localhost:{srv.grpc_port}"
    with grpcclient.InferenceServerClient(
            url, ssl=True, root_certificates=str(certs / "ca.pem"),
            private_key=str(certs / "client.key"),
            certificate_chain=str(certs / "client.pem")) as c:
        assert c.is_server_ready()
        infer_simple(c)
    # Without a client certificate the handshake fails.
    with grpcclient.InferenceServerClient(
            url, ssl=True, root_certificates=str(certs / "ca.pem")) as c:
        with pytest.raises(InferenceServerException):
            c.is_server_live(client_timeout=5)


def test_missing_certificate_fails_start(tmp_path, example_repo_copy):
    srv = harness.OspreyServer(example_repo_copy, ["--grpc-use-ssl=true"],
                               workdir=tmp_path)
    assert srv.run_to_exit() == 1
    assert "--grpc-use-ssl needs --grpc-server-cert" in srv.log()

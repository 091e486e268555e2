"""Services the S3 repository tests start on free loopback ports.

MotoServer      moto in server mode (a real S3 API), with IAM checks on: an
                IAM user and its access key are made first, then every
                request must be signed with that key.
TruncatingProxy a TCP proxy in front of moto that cuts the first N replies
                to GETs of chosen keys in the middle of the body (a download
                broken mid-file).
SilentListener  a socket that accepts connections and never answers.
FixedReply      an HTTP server answering every request with one S3 error.
"""

import http.server
import json
import socket
import socketserver
import subprocess
import sys
import threading
import time

import boto3
import requests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    def __init__(self, log_path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
             str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(self.endpoint + "/moto-api/", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("moto did not start; see " + str(log_path))
            time.sleep(0.1)
        # IAM checks off while the user and its key are made, then on.
        requests.post(self.endpoint + "/moto-api/reset-auth", data=b"1000000")
        iam = self._client("iam", "setup", "setup")
        iam.create_user(UserName="osprey")
        iam.put_user_policy(
            UserName="osprey", PolicyName="all",
            PolicyDocument=json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="osprey")["AccessKey"]
        self.key_id = key["AccessKeyId"]
        self.secret = key["SecretAccessKey"]
        requests.post(self.endpoint + "/moto-api/reset-auth", data=b"0")
        self.s3 = self._client("s3", self.key_id, self.secret)
        self.iam = self._client("iam", self.key_id, self.secret)

    def _client(self, service, key_id, secret):
        return boto3.client(service, endpoint_url=self.endpoint,
                            region_name="us-east-1", aws_access_key_id=key_id,
                            aws_secret_access_key=secret)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class _ProxyHandler(socketserver.BaseRequestHandler):
    def handle(self):
        proxy = self.server.owner
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(65536)
            if not data:
                return
            head += data
        first_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, path = first_line.split(" ")[:2]
        # One request per connection: the reply is read to its end.
        head = head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
        with socket.create_connection(("127.0.0.1", proxy.upstream_port)) as up:
            up.sendall(head)
            reply = b""
            while True:
                data = up.recv(65536)
                if not data:
                    break
                reply += data
        keep = None
        with proxy.lock:
            proxy.requests.append((method, path))
            for suffix, (times, fraction) in list(proxy.cuts.items()):
                if method == "GET" and path.split("?")[0].endswith(suffix) \
                        and times > 0:
                    proxy.cuts[suffix] = (times - 1, fraction)
                    keep = fraction
        if keep is not None:
            end = reply.index(b"\r\n\r\n") + 4
            body = len(reply) - end
            reply = reply[:end + int(body * keep)]  # headers promise it all
        self.request.sendall(reply)


class TruncatingProxy:
    """cut(key_suffix, times, keep): the next `times` GET replies for keys
    ending in key_suffix stop after `keep` (a fraction) of their body."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.cuts = {}
        self.requests = []
        self.lock = threading.Lock()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _ProxyHandler)
        self.server.daemon_threads = True
        self.server.owner = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def cut(self, key_suffix, times, keep=0.5):
        with self.lock:
            self.cuts[key_suffix] = (times, keep)

    def gets(self, key_suffix):
        with self.lock:
            return sum(1 for m, p in self.requests
                       if m == "GET" and p.split("?")[0].endswith(key_suffix))

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class SilentListener:
    """Accepts TCP connections (the kernel completes the handshake) and
    never reads or answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]

    def stop(self):
        self.sock.close()


class FixedReply:
    """Answers every request with `status` and the XML `body`; .count is
    the number of requests."""

    def __init__(self, status, body):
        owner = self
        self.count = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.count += 1
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

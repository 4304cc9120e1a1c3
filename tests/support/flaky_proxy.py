"""An HTTP proxy between the GCS clients and fake-gcs-server that injects the faults a real bucket
shows under load: 503 answers and stalls (a request that gets no answer for a while).

    proxy = FlakyProxy(server.url)       # then point STORAGE_EMULATOR_HOST at proxy.url
    proxy.fail_next(5)                   # the next 5 requests get 503 Service Unavailable
    proxy.fail_rate = 0.2                # or each request fails with this probability
    proxy.stall_next(2, seconds=3)       # the next 2 requests wait 3 s before being forwarded
    proxy.fail_status = 401              # what the injected failures answer (default 503)
    proxy.missing_downloads = "name"     # downloads of objects so named: 404 (deleted meanwhile)
    proxy.only = "checkpoints/"          # inject the failures only into requests for objects
                                         # whose name holds this (a prefix refused, say)
    proxy.requests, proxy.injected       # counts, for the test's assertions

Runs in a thread of the test process; binaries started by the test reach it through the
environment like the server itself. `proxied` points this process's bert_jax.storage at one.
"""

import contextlib
import http.server
import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

# What GCS answers a request without credentials for a bucket that is not public, and one whose
# credentials lack the permission.
_MESSAGES = {
    401: "Anonymous caller does not have storage.objects.get access to the Google Cloud Storage "
    "object. Permission 'storage.objects.get' denied on resource (or it may not exist).",
    403: "caller does not have storage.objects.get access to the Google Cloud Storage object.",
}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class FlakyProxy:
    def __init__(self, upstream: str, seed: int = 0):
        self.upstream = upstream.rstrip("/")
        self.fail_status = 503
        self.missing_downloads = ""
        self.only = ""
        self.fail_rate = 0.0
        self.stall_seconds = 0.0
        self.requests = 0
        self.injected = 0
        self._fail = 0
        self._stall = 0
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = urllib.parse.unquote(self.path.partition("?")[0])
                if "name=" in self.path:  # an upload names its object in the query
                    target += urllib.parse.unquote(self.path.partition("name=")[2])
                fault = proxy._draw() if proxy.only in target else None
                gone = proxy.missing_downloads
                if gone and "alt=media" in self.path and gone in target:
                    fault, code = "fail", 404  # its metadata still answers: deleted meanwhile
                else:
                    code = proxy.fail_status
                if fault == "fail":
                    text = _MESSAGES.get(code, f"injected {code}")
                    message = json.dumps({"error": {"code": code, "message": text}}).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                if fault == "stall":
                    time.sleep(proxy.stall_seconds)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                request = urllib.request.Request(
                    proxy.upstream + self.path,
                    data=body if body or self.command in ("POST", "PUT") else None,
                    headers=headers,
                    method=self.command,
                )
                try:
                    with urllib.request.urlopen(request, timeout=120) as response:
                        status, data, out = response.status, response.read(), response.headers
                except urllib.error.HTTPError as e:
                    status, data, out = e.code, e.read(), e.headers
                except OSError:  # the server is down: what a load balancer answers
                    status, data, out = 502, b"", {}
                try:
                    self.send_response(status)
                    for key, value in out.items():
                        if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up on a stalled request and hung up

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _relay

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def _draw(self) -> str | None:
        with self._lock:
            self.requests += 1
            if self._fail > 0:
                self._fail -= 1
                self.injected += 1
                return "fail"
            if self._stall > 0:
                self._stall -= 1
                self.injected += 1
                return "stall"
            if self.fail_rate and self._rng.random() < self.fail_rate:
                self.injected += 1
                return "fail"
        return None

    def fail_next(self, n: int) -> None:
        with self._lock:
            self._fail = n

    def stall_next(self, n: int, seconds: float) -> None:
        with self._lock:
            self._stall, self.stall_seconds = n, seconds

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextlib.contextmanager
def proxied(server_url: str, monkeypatch, request_timeout: float | None = None, seed: int = 0):
    """A FlakyProxy in front of `server_url` that bert_jax.storage's clients in this process go
    through while the block runs (fresh clients: gcsfs keeps one per settings), with gcsfs'
    request timeout set to `request_timeout` seconds when given."""
    import fsspec
    import gcsfs

    from bert_jax import storage

    proxy = FlakyProxy(server_url, seed)
    monkeypatch.setattr(storage.remote, "_configured", False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    if request_timeout:
        gcs = fsspec.config.conf.setdefault("gcs", {})
        monkeypatch.setitem(gcs, "requests_timeout", request_timeout)
    gcsfs.GCSFileSystem.clear_instance_cache()
    try:
        yield proxy
    finally:
        proxy.close()
        gcsfs.GCSFileSystem.clear_instance_cache()

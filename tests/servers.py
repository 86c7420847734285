"""Real servers on 127.0.0.1 for the remote-dataset tests: moto's S3 server and a plain HTTP
server over a folder that counts the GETs of each file (and can fail the first N of them)."""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


_MOTO: dict[str, str] = {}


def _moto_endpoint(server_mod: Any) -> str:
    """The URL of this process's moto server (one per pytest-xdist worker), started on first
    use and stopped at exit: starting and stopping one per test cost ~0.8 s each time."""
    if "endpoint" not in _MOTO:
        port = free_port()
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        owner = os.getpid()

        def stop() -> None:  # in this process only: a forked child has no server thread
            if os.getpid() == owner:
                server.stop()

        atexit.register(stop)
        _MOTO["endpoint"] = f"http://127.0.0.1:{port}"
    return _MOTO["endpoint"]


@contextmanager
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's standalone S3 server on 127.0.0.1, emptied (no bucket, no object); AWS_* set to
    dummies pointing at it."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    endpoint = _moto_endpoint(server_mod)
    # moto keeps its buckets per process, not per server: every use starts empty.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    for key, value in {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield endpoint
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


def upload_folder(local: Path, url: str) -> None:
    """Copy a local dataset folder to url with fsspec (manifest.json last)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    files = sorted(p for p in local.rglob("*") if p.is_file())
    files.sort(key=lambda p: p.name == "manifest.json")
    for path in files:
        fs.put_file(str(path), f"{root}/{path.relative_to(local).as_posix()}")


class _Handler(SimpleHTTPRequestHandler):
    def __init__(self, *args: Any, state: dict[str, Any], **kwargs: Any) -> None:
        self.state = state
        super().__init__(*args, **kwargs)

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        name = self.path.lstrip("/")
        with self.state["lock"]:
            start = (self.headers.get("Range") or "bytes=0-").split("=")[1].split("-")[0]
            if start in ("", "0"):
                self.state["gets"][name] += 1
                self.state["log"].append(name)
            fails = self.state["fail"].get(name, 0)
            if fails:
                self.state["fail"][name] = fails - 1
        if fails:
            self.send_error(503, "try again")
            return
        delay = self.state["delay"].get(name)
        if delay:  # half the body, a pause, the rest: a download caught in the middle
            data = (Path(self.directory) / name).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            time.sleep(delay)
            self.wfile.write(data[len(data) // 2:])
            return
        super().do_GET()


@contextmanager
def http_server(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Serve folder at http://127.0.0.1:PORT; state["gets"] counts whole-file GETs per path
    (state["log"] lists them in order), state["fail"][path] = N makes the next N GETs of
    path answer 503, and state["delay"][path] = S pauses S seconds in the middle of each
    GET of path."""
    state: dict[str, Any] = {"gets": Counter(), "log": [], "fail": {}, "delay": {},
                             "lock": threading.Lock()}
    handler = partial(_Handler, directory=os.fspath(folder), state=state)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

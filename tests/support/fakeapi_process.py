"""The loopback API server in a process of its own, for benchmarks whose figures must not count
the server's work (its threads would share the measured process's interpreter lock).

``FakeApiProcess`` starts ``python -m tests.support.fakeapi_process``, which serves a
:class:`~tests.support.fakeapi.FakeApiServer` and takes its test-side calls (``add_claim``,
``add_node``, ``write_kubeconfig``...) as JSON lines on stdin, answering each with a JSON line on
stdout. The API itself is reached over HTTP as usual.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class FakeApiProcess:
    def __init__(self) -> None:
        env_path = f"{REPO / 'src'}:{REPO}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fakeapi_process"], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
        self.url = self.call("url")

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"call": name, "args": args, "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the API server process ended")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["result"]

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: self.call(name, *a, **k)

    def write_kubeconfig(self, path: Path) -> Path:
        return Path(self.call("write_kubeconfig", str(path)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def serve() -> None:
    from tests.support.fakeapi import FakeApiServer

    api = FakeApiServer().start()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            name = req["call"]
            if name == "url":
                result: Any = api.url
            elif name == "write_kubeconfig":
                result = str(api.write_kubeconfig(Path(req["args"][0])))
            else:
                result = getattr(api, name)(*req["args"], **req["kwargs"])
            out = {"result": json.loads(json.dumps(result, default=str))}
        except Exception as exc:  # the test side sees the server's error
            out = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    api.stop()


if __name__ == "__main__":
    serve()

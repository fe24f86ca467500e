"""A bare grpcio server with the plugin's shape (one server, two unix sockets, a thread pool) and
nothing else, for tests/bench/test_grpc_idle.py; settings come from the environment."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from concurrent import futures

import grpc


def main() -> None:
    if os.environ.get("LIKEN_BENCH_LONG_CHECK"):
        import grpc._server as grpc_server

        grpc_server._DEALLOCATED_SERVER_CHECK_PERIOD_S = 3600.0  # as the agent sets it
    options = []
    for item in filter(None, os.environ.get("LIKEN_BENCH_GRPC_OPTIONS", "").split(",")):
        key, value = item.split("=")
        options.append((key, int(value)))
    where = tempfile.mkdtemp(prefix="lkgrpc-")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
    server.add_insecure_port(f"unix://{where}/dra.sock")
    server.add_insecure_port(f"unix://{where}/reg.sock")
    server.start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    signal.sigwait({signal.SIGTERM})
    server.stop(None)


if __name__ == "__main__":
    main()

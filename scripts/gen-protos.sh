#!/usr/bin/env bash
# Regenerate the Python gRPC stubs of the kubelet contracts (src/liken_devices/plugin/proto/*.proto)
# into src/liken_devices/plugin/gen/ with grpcio-tools. The generated modules import each other
# by absolute top-level names ("import dra_v1_pb2"); they are rewritten to package-relative
# imports so that liken_devices.plugin.gen works as a package.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SRC=src/liken_devices/plugin/proto
OUT=src/liken_devices/plugin/gen
rm -f "$OUT"/*_pb2.py "$OUT"/*_pb2.pyi "$OUT"/*_pb2_grpc.py
"$PY" -m grpc_tools.protoc -I"$SRC" --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  "$SRC"/*.proto
for f in "$OUT"/*_pb2_grpc.py "$OUT"/*_pb2.py; do
  sed -i -E 's/^import ([a-z0-9_]+_pb2) as /from . import \1 as /' "$f"
done
cat > "$OUT/__init__.py" <<'PYEOF'
"""Generated gRPC stubs of the kubelet contracts; regenerate with scripts/gen-protos.sh."""
PYEOF
echo "generated: $(ls "$OUT" | tr '\n' ' ')"

"""Generated gRPC stubs of the kubelet contracts; regenerate with scripts/gen-protos.sh."""

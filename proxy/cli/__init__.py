"""The `toolcall-proxy` command line: serve, doctor, sanitize."""

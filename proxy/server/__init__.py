"""The HTTP side: the ASGI app, its routes, the server's HTTP protocol and graceful shutdown."""

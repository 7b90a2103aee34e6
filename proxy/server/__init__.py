"""The HTTP side: the ASGI app, its routes, the lean protocol and graceful shutdown."""

"""The sans-IO core for /chat/completions: no sockets, no awaits, no clocks, no globals."""

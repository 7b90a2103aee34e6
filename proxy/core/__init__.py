"""The grammar-neutral core every API surface shares (sans-IO: no sockets, awaits, clocks or
globals): tool-call ids and dialects (`ids`), the history walk's decisions (`ledger`), keep or
mint and replays (`decide`), the breaker and follow-up planning (`guard`), decisions for logs
(`notes`), what an exchange tells the shell (`events`), argument completeness
(`jsoncomplete`) and leaked text calls (`textcalls`). Each surface's grammar lives in its own
package: `proxy.chat`, `proxy.anthropic`, `proxy.responses`."""

"""The upstream side: the connection pool, the raw transport and one upstream call."""

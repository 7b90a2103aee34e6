"""What operators read: the request log line, metrics and the start-up lines."""

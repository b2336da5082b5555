"""Real storage servers for the tests and benchmarks: one module per server, each able to start it on loopback."""

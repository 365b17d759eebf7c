"""What the tests share: servers, builders, waits and test runners (one module each)."""

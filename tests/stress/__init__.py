"""Stress runs (kill loop, fuzzers): scripts of their own, which the tests run at small sizes."""

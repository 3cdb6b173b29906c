"""Benchmark scripts: each prints a table (and JSON with --json); none is a test."""

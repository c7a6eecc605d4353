"""Benchmarks that measure official_bert beside a peer in one run."""

"""Helpers for tests and benchmarks (throwaway servers); not used by pipelines."""

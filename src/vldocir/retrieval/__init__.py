"""Retrievers, runs and retrieval settings."""

"""Dagster layer."""

"""The `lakelog` command line (`lakelog.cli.main`), with the local Spark server's commands."""

from lakelog.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

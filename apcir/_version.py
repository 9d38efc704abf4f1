"""apcir's version: its own module, so that a module inside apcir records it without importing the package top."""

__version__ = "0.1.0"

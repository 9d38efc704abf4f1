"""Run files and submission formats."""

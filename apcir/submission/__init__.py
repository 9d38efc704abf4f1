"""Stage 6, export: iKAT submissions (2023/2024 JSON, 2025 JSONL) and their offline validation.

Formats are registered in :data:`apcir.submission.formats.FORMATS`.
"""

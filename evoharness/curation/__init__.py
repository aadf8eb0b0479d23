"""Curation: consolidated examples → filtered, deduplicated, balanced Hugging Face SFT datasets."""

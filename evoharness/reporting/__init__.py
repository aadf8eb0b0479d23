"""Tables and plots attached to assets: Markdown tables and PNG charts (embedded or written to disk)."""

"""The pre-registered analysis: its primary family, tested as registered, and the report's Confirmatory section."""

"""The disk cache of API answers (JSON only, never pickle), its keys, its claims between processes, and its checks."""

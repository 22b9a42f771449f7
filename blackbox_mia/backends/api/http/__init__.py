"""Transport to an OpenAI-compatible endpoint: wire format and dialects, answer validation, retries, and the disk cache of answers."""

"""Fast tests, the default (``pytest tests/unit``): no canary training, no real servers, no
subprocess pipelines, no end-to-end runs of the tracker through ``bbmia serve``."""

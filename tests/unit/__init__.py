"""Fast tests, to run while working (``pytest tests/unit``; ``pytest`` runs these and
``tests/integration``): no canary training, no real servers, no subprocess pipelines, no
end-to-end runs of the tracker through ``bbmia serve``."""

"""The spend guard's limits (:mod:`.guard`), apart so that the CLI's option table reads them
without importing the estimators."""

GUARD_REQUESTS = 10_000  # without a cap or a confirmation, a run estimated at more requests than this is refused
GUARD_USD = 1.0  # ... or at more USD than this against a priced endpoint

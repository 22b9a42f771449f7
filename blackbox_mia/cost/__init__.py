"""Cost in one place: estimates before a run (:mod:`.estimate`; the texts a run scores and its
groups, :mod:`.plan`), list prices (:mod:`.prices`) and what a client spent and may spend
(:mod:`.usage`). Each backend estimates its own requests (the black-box tracker's request model
is :mod:`blackbox_mia.backends.api.tracker.costs`; a local model sends none)."""

"""Cost units, below the backends: a backend's estimate of its requests (:mod:`.estimate`), list
prices (:mod:`.prices`) and what a client spent and may spend (:mod:`.usage`). Each backend
estimates its own requests (the black-box tracker's request model is
:mod:`blackbox_mia.backends.api.tracker.costs`; a local model sends none); what a whole run will
spend, and the spend guard, are in :mod:`blackbox_mia.spend`."""

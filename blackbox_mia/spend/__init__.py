"""What a run will spend and may spend: its estimate before the first request (:mod:`.plan`,
what ``--dry-run`` prints), the spend guard that judges it (:mod:`.guard`, limits in
:mod:`.limits`) and the usage report after it. The unit costs it adds up (a backend's
:class:`~blackbox_mia.cost.estimate.CostEstimate`, list prices, a client's usage) are in
:mod:`blackbox_mia.cost`, below the backends."""

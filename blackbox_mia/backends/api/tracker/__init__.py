"""The logit_bias probability tracker: lp_i of every token of a text through a top-n API (:mod:`.tracker`), its strategies and its cost model."""

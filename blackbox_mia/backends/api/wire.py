"""Facts of the OpenAI-compatible wire format, shared by the client and the emulator.

Sources: the OpenAI API reference for ``/v1/completions`` and ``/v1/chat/completions``
(``logit_bias``: "values from -100 to 100"; at most 300 entries; the legacy endpoint's
``logprobs`` at most 5; chat ``top_logprobs`` at most 20).
"""

MAX_BIAS = 100.0  # cap on |logit_bias| values
MAX_BIAS_ENTRIES = 300  # cap on logit_bias entries per request

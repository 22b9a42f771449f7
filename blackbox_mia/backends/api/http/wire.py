"""Facts of the OpenAI-compatible wire format, shared by the client and the emulator.

Source of every value: the OpenAI API reference for ``/v1/completions`` (legacy) and
``/v1/chat/completions`` (https://platform.openai.com/docs/api-reference), as quoted beside each.
"""

MAX_BIAS = 100.0  # cap on |logit_bias| values: "values from -100 to 100"
MAX_BIAS_ENTRIES = 300  # cap on logit_bias entries per request
MAX_LOGPROBS_COMPLETIONS = 5  # completions 'logprobs': "The maximum value for logprobs is 5"
MAX_TOP_LOGPROBS_CHAT = 20  # chat 'top_logprobs': "An integer between 0 and 20"
FLOOR_LOGPROB = -9999.0  # chat logprobs: "the value -9999.0 is used to signify that the token is very unlikely"
DEFAULT_MAX_TOKENS = 16  # completions 'max_tokens': "Defaults to 16"
MAX_STOP_SEQUENCES = 4  # 'stop': "Up to 4 sequences where the API will stop generating further tokens"
MAX_TEMPERATURE = 2.0  # 'temperature': "What sampling temperature to use, between 0 and 2" (default 1)

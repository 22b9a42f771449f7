"""blackbox_mia: membership inference and benchmark-contamination audits for LLMs.

Black-box through any OpenAI-compatible endpoint (top-n log-probs + logit_bias), white-box
through local Hugging Face models. Convention everywhere: higher score = more likely a member.
"""

__version__ = "0.1.0"

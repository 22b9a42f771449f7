"""Chat templates of the validation server: how a chat request's messages become the prompt text.

Three kinds of ``ServerConfig.chat_template``:

* ``None``: the messages' contents concatenated as is (no template: values are the text's own);
* a text with ``{content}`` (:data:`CONTENT_FIELD`), e.g. :data:`DEFAULT_CHAT_TEMPLATE`: the
  concatenated contents put in its place (roles ignored);
* a REAL chat template, rendered as a chat model's server renders it (Hugging Face's
  ``apply_chat_template`` with ``add_generation_prompt=True``, the way vLLM and TGI render chat
  requests): every message with its role, then the assistant's turn opened. Either
  :data:`MODEL_TEMPLATE` (``"model"``: the served tokenizer's own ``chat_template``, else
  :data:`CHATML_TEMPLATE`), or the Jinja source of a template (any text with ``{%`` or ``{{``).

The rendered text is tokenized like any text prompt (no special tokens added, BOS only with
``text_bos``), as vLLM tokenizes rendered chat prompts.
"""

from __future__ import annotations

from ..types import BlackboxMIAError
from .errors import bad_request

CONTENT_FIELD = "{content}"  # where a {content} template puts the concatenated message contents
DEFAULT_CHAT_TEMPLATE = "<|user|>\n" + CONTENT_FIELD + "\n<|assistant|>\n"
MODEL_TEMPLATE = "model"  # the served tokenizer's own chat template, else CHATML_TEMPLATE
# ChatML (OpenAI's chat markup, used by Qwen, Yi, Hermes...): the default for a tokenizer without a
# template. Its two markers are single tokens in a ChatML model's vocabulary (a chat canary adds them).
CHATML_START, CHATML_END = "<|im_start|>", "<|im_end|>"
CHATML_MARKERS = (CHATML_START, CHATML_END)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    f"{{{{ '{CHATML_START}' + message['role'] + '\\n' + message['content'] + '{CHATML_END}\\n' }}}}"
    "{% endfor %}"
    f"{{% if add_generation_prompt %}}{{{{ '{CHATML_START}assistant\\n' }}}}{{% endif %}}"
)
JINJA_MARKERS = ("{%", "{{")


def is_jinja(template: str) -> bool:
    """Whether ``template`` is the Jinja source of a real chat template (it has ``{%`` or ``{{``)."""
    return any(marker in template for marker in JINJA_MARKERS)


def check_chat_template(template: str | None) -> None:
    """Check a ``ServerConfig.chat_template`` value (see the module docstring).

    Raises:
        BlackboxMIAError: a template that is neither :data:`MODEL_TEMPLATE`, nor Jinja, nor has
            ``{content}``.
    """
    if template is None or template == MODEL_TEMPLATE or is_jinja(template):
        return
    if CONTENT_FIELD not in template:
        raise BlackboxMIAError(f"chat_template must be {MODEL_TEMPLATE!r}, a Jinja chat template, "
                               f"or a text with {CONTENT_FIELD!r}")


def load_chat_template(spec: str) -> str:
    """The chat template ``spec`` names: ``"default"`` is :data:`DEFAULT_CHAT_TEMPLATE`,
    ``"model"`` the served tokenizer's own (:data:`MODEL_TEMPLATE`), ``"chatml"``
    :data:`CHATML_TEMPLATE`; anything else a UTF-8 file holding a Jinja chat template or a text
    with ``{content}``.

    Raises:
        BlackboxMIAError: the file cannot be read, or holds neither kind of template.
    """
    named = {"default": DEFAULT_CHAT_TEMPLATE, MODEL_TEMPLATE: MODEL_TEMPLATE, "chatml": CHATML_TEMPLATE}
    if spec in named:
        return named[spec]
    try:
        with open(spec, encoding="utf-8") as f:
            template = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"cannot read chat template {spec!r}: {exc}") from exc
    if not is_jinja(template) and CONTENT_FIELD not in template:
        raise BlackboxMIAError(f"chat template {spec!r} has no {CONTENT_FIELD!r} and is not a Jinja template")
    return template


class ChatFormatter:
    """Renders validated chat messages into the prompt text.

    Args:
        template: a ``ServerConfig.chat_template`` value.
        tokenizer: the served Hugging Face tokenizer (its ``chat_template`` and
            ``apply_chat_template`` render real templates).

    Attributes:
        source: the Jinja source rendered (``None`` for the concatenation and ``{content}`` kinds).
    """

    def __init__(self, template: str | None, tokenizer):
        self._template = template
        self._tokenizer = tokenizer
        if template == MODEL_TEMPLATE:
            self.source = tokenizer.chat_template or CHATML_TEMPLATE
        else:
            self.source = template if template is not None and is_jinja(template) else None

    def __call__(self, messages: list[dict[str, str]]) -> str:
        """The prompt text of ``messages`` (``{"role", "content"}`` with string contents).

        Raises:
            HttpError: 400 (param ``messages``) when the template refuses the messages (a Jinja
                template's ``raise_exception``, e.g. roles that do not alternate).
        """
        if self.source is not None:
            from jinja2 import TemplateError

            try:
                return self._tokenizer.apply_chat_template(
                    messages, chat_template=self.source, tokenize=False, add_generation_prompt=True)
            except TemplateError as exc:
                raise bad_request(f"the chat template refused these messages: {exc}", "messages",
                                  "invalid_value") from None
        text = "".join(m["content"] for m in messages)
        return text if self._template is None else self._template.replace(CONTENT_FIELD, text)

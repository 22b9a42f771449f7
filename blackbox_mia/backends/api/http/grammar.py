"""GBNF grammars (llama.cpp's ``grammar`` request field) for requests that must not run away.

llama-cpp-python keeps generating past ``max_tokens`` while its output ends inside a UTF-8
character, so a request that biases a token ending inside one could run the server to the end of
its context (:mod:`.endpoint`). A grammar that admits exactly some characters and then printable
ASCII only ends every token after them on a character, so such a request stops at
``max_tokens`` (:mod:`.spelling`).
"""

from __future__ import annotations

ASCII_TAIL = "[ -~]*"  # what may follow the spelled characters: printable ASCII (each token ends a character)


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal: ASCII letters, digits and spaces as they are, every
    other character as its ``\\uXXXX`` / ``\\UXXXXXXXX`` escape."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == " " or (ch.isascii() and ch.isalnum()):
            out.append(ch)
        else:
            out.append(f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}")
    return '"' + "".join(out) + '"'


def spelling_grammar(text: str) -> str:
    """A grammar admitting exactly ``text``, then printable ASCII only."""
    return f"root ::= {gbnf_literal(text)} {ASCII_TAIL}"

r"""Text from a spec, made safe to show: control characters become visible escapes.

Names, keys and messages come from files someone else may have written. Written raw, a
carriage return ends a Markdown code fence, an ESC sequence clears a terminal or retitles its
window, and a C0 character makes an SVG file invalid XML. So everything archspec prints or
writes for people passes through `visible`, which turns each such character into the escape
Python would write for it (`\r`, `\x1b`, `\u202e`), leaving ordinary text, and the line breaks
and tabs a format means, as they are.

What counts as a control character: C0 (U+0000-U+001F), DEL, C1 (U+0080-U+009F), the line
and paragraph separators U+2028/U+2029, the bidirectional overrides and isolates (which make a
terminal show text in another order than it is), lone surrogates (which no UTF-8 file can hold)
and the noncharacters U+FFFE/U+FFFF (which XML forbids).
"""

from __future__ import annotations

import re

NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def escape_of(char: str) -> str:
    """The visible escape for one control character: \\r, \\x1b, \\u202e."""
    if char in NAMED:
        return NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str, keep: str = "") -> str:
    """`text` with each control character not in `keep` written as its escape.
    `keep="\\n\\t"` for text whose lines are meant; the default for one line (a name, a label)."""
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else escape_of(m.group()), text)


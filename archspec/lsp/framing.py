"""The editor's messages, read from stdin whatever arrives there.

The LSP base protocol frames each JSON-RPC message as header lines (`Content-Length: N`, maybe
`Content-Type: ...`), a blank line, then exactly N bytes of JSON. pygls's own reader trusts that
framing: after a message without Content-Length, with a negative one, or a few random bytes, it
reads the next header as part of a body, and so on for every later message, the server alive but
answering nothing. This reader stands in front of it and resynchronises:

- A header that is not one (a line that is not `Name: value`, a byte that is not printable
  ASCII, over 8 KiB before the blank line), that has no Content-Length, or whose Content-Length
  is not a byte count (negative, not a number, 0, over 64 MiB) is skipped, and so is everything
  after it up to the next `Content-Length: N` line. Such a line never occurs inside well-formed
  JSON (a JSON string holds no raw line break, and outside strings those words are not JSON), so
  the skip never stops inside a well-formed message.
- A body that turns out to hold such a line ends there (its Content-Length promised more than
  was sent), and the message after it is read: a truncated message never swallows the next one.
- A body that is not a JSON-RPC 2.0 object (cut short, not JSON, a list) is skipped the same way
  (looking for that line from the body's first byte on).

Each skip is one line on stderr (the editor's log of the server; the first 20, then a line that
says the rest are not told). Nothing in a broken frame is trusted: a request whose own frame was
broken gets no answer (nor one whose header the broken bytes before it ran into), and the
editor's request times out or is cancelled, as for a lost one; the messages after it are read.

Why resynchronise rather than exit: the next good message can be found (above), and exiting
would drop every open document's check and leave recovery to the editor, which may not restart
the server (Neovim does not; VS Code gives up after five crashes in three minutes). The end of
stdin still ends the server, as before.

`Frames` is what pygls reads: each good message again, framed the way pygls expects.
"""

from __future__ import annotations

import json
import re
import sys
from typing import BinaryIO, Callable

MAX_HEADER = 8 * 1024  # bytes of header lines before the blank line
MAX_BODY = 64 * 1024 * 1024  # bytes of one message (a spec is at most 256 KiB; any YAML file the editor opens)
CHUNK = 64 * 1024
MOST_REPORTS = 20
HEADER_TAIL = 256  # bytes kept between reads while looking for a header line that may straddle them

# `Content-Length: N` and its line break: the one line that starts a message, never inside JSON.
CONTENT_LENGTH_LINE = re.compile(rb"content-length[ \t]*:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
HEADER_LINE = re.compile(rb"([A-Za-z0-9-]+)[ \t]*:[ \t]*(.*?)[ \t]*")
HEADER_END = re.compile(rb"\n\r?\n")  # the blank line after the header lines
NOT_HEADER_BYTE = re.compile(rb"[^\x20-\x7e\t\r\n]")


class Broken(Exception):
    """Input that is not a well-formed message; the text says what it was."""

    def __init__(self, what: str, skip_from: int | None = 1):
        super().__init__(what)
        # where the next `Content-Length` line is looked for: past the first byte of a broken
        # header, from the start of a broken body (it was pushed back), or not at all (None)
        self.skip_from = skip_from


class EndOfInput(Exception):
    def __init__(self, inside: bool):
        super().__init__()
        self.inside = inside  # whether it ended inside a message


def report_on_stderr(line: str) -> None:
    sys.stderr.write(f"archspec lsp: {line}\n")
    sys.stderr.flush()


class MessageReader:
    """The bodies of the well-formed messages on a byte stream, skipping everything else."""

    def __init__(self, stream: BinaryIO, report: Callable[[str], None] = report_on_stderr):
        self._read = getattr(stream, "read1", stream.read)
        self.buffer = bytearray()
        self.report = report
        self.reports = 0
        self.lost: int | None = None  # after a broken message: where to look for the next one

    def next(self) -> bytes | None:
        """The next message's body (a JSON-RPC 2.0 object, as bytes); None at the end of input."""
        while True:
            try:
                return self._message()
            except Broken as problem:
                self._tell(f"skipped {problem}; reading on from the next message")
                self.lost = problem.skip_from
            except EndOfInput as end:
                if end.inside:
                    self._tell("the input ended inside a message")
                return None

    def _message(self) -> bytes:
        if self.lost is not None:
            self._skip_to_next_header(self.lost)
            self.lost = None
        length = self._header()
        body = self._body(length)
        problem = what_is_wrong_with(body)
        if problem is not None:
            self.buffer[:0] = body  # a Content-Length line may straddle the body's end
            raise Broken(problem, skip_from=0)
        return body

    def _tell(self, line: str) -> None:
        self.reports += 1
        if self.reports <= MOST_REPORTS:
            self.report(line)
        elif self.reports == MOST_REPORTS + 1:
            self.report(f"more than {MOST_REPORTS} broken messages: the rest are skipped without a word")

    def _fill(self) -> bool:
        """Read what the stream has (waiting for at least a byte); False at its end."""
        chunk = self._read(CHUNK)
        self.buffer += chunk
        return bool(chunk)

    # -- the header --------------------------------------------------------------------------------
    def _header(self) -> int:
        """Read the header lines and the blank line after them; the body's length."""
        while True:
            end = HEADER_END.search(self.buffer)
            limit = end.end() if end else len(self.buffer)
            bad = NOT_HEADER_BYTE.search(self.buffer, 0, limit)
            if bad:
                raise Broken(f"a byte {bytes([self.buffer[bad.start()]])!r} where a message header was expected")
            if end:
                break
            if len(self.buffer) > MAX_HEADER:
                raise Broken(f"a message header over {MAX_HEADER // 1024} KiB")
            if not self._fill():
                raise EndOfInput(inside=bool(self.buffer.strip()))
        lines = bytes(self.buffer[:end.start()]).split(b"\n")
        length = content_length([line.rstrip(b"\r") for line in lines])
        del self.buffer[:end.end()]
        return length

    def _skip_to_next_header(self, start: int) -> None:
        """Drop input up to the next `Content-Length: N` line at or past `start`."""
        while True:
            found = CONTENT_LENGTH_LINE.search(self.buffer, start)
            if found:
                del self.buffer[:found.start()]
                return
            del self.buffer[:max(start, len(self.buffer) - HEADER_TAIL)]
            start = 0
            if not self._fill():
                raise EndOfInput(inside=False)

    # -- the body ----------------------------------------------------------------------------------
    def _body(self, length: int) -> bytes:
        """The next `length` bytes, unless the next message's header begins inside them."""
        scanned = 0
        while True:
            found = CONTENT_LENGTH_LINE.search(self.buffer, max(0, scanned - HEADER_TAIL), length)
            if found:
                del self.buffer[:found.start()]
                raise Broken(f"a message cut short (Content-Length {length}, but the next message "
                             f"began after {found.start()} bytes)", skip_from=None)
            if len(self.buffer) >= length:
                body = bytes(self.buffer[:length])
                del self.buffer[:length]
                return body
            scanned = len(self.buffer)
            if not self._fill():
                raise EndOfInput(inside=True)


def content_length(lines: list[bytes]) -> int:
    """The byte count a message's header lines give."""
    lengths = []
    for line in lines:
        match = HEADER_LINE.fullmatch(line)
        if match is None:
            raise Broken(f"a message header line that is not `Name: value` ({line[:40]!r})")
        if match.group(1).lower() == b"content-length":
            lengths.append(match.group(2).decode("ascii"))
    if len(lengths) != 1:
        raise Broken("a message without a Content-Length header" if not lengths
                     else "a message with more than one Content-Length header")
    text = lengths[0]
    if not text.isdigit() or not text.strip("0"):
        raise Broken(f"a message whose Content-Length {text[:20]!r} is not a byte count")
    if len(text) > len(str(MAX_BODY)) or int(text) > MAX_BODY:
        raise Broken(f"a message of {text[:20]} bytes (Content-Length), over the {MAX_BODY // 2**20} MiB "
                     "archspec reads")
    return int(text)


def what_is_wrong_with(body: bytes) -> str | None:
    """Why a body is no JSON-RPC 2.0 message (None: it is one)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return f"a message that is not JSON ({len(body):,} bytes)"
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "a message that is not a JSON-RPC 2.0 object"
    return None


class Frames:
    """What pygls reads as its stdin: each good message, framed as `Content-Length: N`, a blank
    line and the body (pygls reads header lines with `readline` and the body with `read`)."""

    def __init__(self, messages: MessageReader):
        self.messages = messages
        self.pending = b""

    def readline(self) -> bytes:
        if not self.pending:
            body = self.messages.next()
            if body is None:
                return b""
            self.pending = b"Content-Length: %d\r\n\r\n" % len(body) + body
        end = self.pending.find(b"\n") + 1 or len(self.pending)
        line, self.pending = self.pending[:end], self.pending[end:]
        return line

    def read(self, size: int) -> bytes:
        data, self.pending = self.pending[:size], self.pending[size:]
        return data

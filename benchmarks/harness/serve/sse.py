"""Server-sent events out of an HTTP body that arrives in arbitrary reads (pure).

A server may join several queued events into one write (`transformers serve` does; vLLM issue
#27485), and a network read may end in the middle of an event. `SseParser.feed(data)` takes one
read's bytes and returns the complete events it finished, each as its `data:` payload (the
lines of one event joined with newlines, as the SSE specification says); what is left of an
unfinished event waits for the next read. Comments (`:`), `event:`, `id:` and `retry:` lines are
ignored; `\\r\\n` and `\\r` line ends are accepted. It deliberately knows nothing of JSON or
tokens (`client` reads the payloads).
"""

from __future__ import annotations

import codecs


class SseParser:
    """Incremental SSE decoder: `feed` bytes, get the `data` payloads of finished events."""

    def __init__(self) -> None:
        self._buffer = ""
        self._data: list[str] = []
        # A multi-byte character split across reads is decoded when its last byte arrives.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> list[str]:
        """The payloads of the events this read completed, in order."""
        self._buffer += self._decoder.decode(chunk)
        events: list[str] = []
        # A "\r" ending the buffer may be the first half of a "\r\n" split across reads.
        ready, held = (
            (self._buffer[:-1], "\r") if self._buffer.endswith("\r") else (self._buffer, "")
        )
        *lines, rest = ready.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._buffer = rest + held
        for line in lines:
            if line == "":
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
        return events

    def close(self) -> list[str]:
        """The last event when the body ended without its blank line (lenient servers)."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        self._buffer, self._data = "", []
        return events

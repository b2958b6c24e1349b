"""The demo's live terminal view: a pure rendering of a state snapshot, and a small ANSI screen.

Theory of operation. ``broker-mqtt demo`` takes a :class:`Snapshot` of what it knows about twice a
second (who is "it", i.e. the elected master, and the epoch of each store; messages per second;
store size; the peers; the Spark job; the latest events) and :func:`render` turns it into lines of
plain text, a pure function tested without a terminal. :class:`Screen` shows those lines on a
terminal: it switches to the alternate screen (as ``top`` does), redraws in place from the top-left
corner (so stray output from elsewhere is overwritten on the next frame) and switches back on
:meth:`Screen.close`, after which the demo prints its log and summary as ordinary lines. Only used
when stdout is a terminal; otherwise the demo prints plain log lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

__all__ = ["PeerRow", "StoreRow", "Snapshot", "render", "Screen"]


@dataclass(frozen=True, slots=True)
class StoreRow:
    """One elected store as the demo's observer replica sees it."""

    name: str
    master: str | None  #: the name of the node holding the tag (the master), None during an election
    term: int | None  #: the epoch's term
    keys: int
    writes: int  #: entries in the nodes' logs
    spark_keys: int  #: keys written by the Spark job
    stale: bool = False  #: this replica is catching up with the master
    running: bool = True  #: nodes are running (no master then means an election is under way)


@dataclass(frozen=True, slots=True)
class PeerRow:
    """One demo node."""

    name: str
    state: str  #: "starting", "up", "lost", "killed", "removed"
    pid: int | None
    messages: int  #: messages the observer received from it
    acked: int  #: store writes it reported acknowledged


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the view shows, at one moment."""

    broker: str
    namespace: str
    elapsed: float
    duration: float
    phase: str
    rate: int  #: messages/s over the last second
    total: int
    stores: tuple[StoreRow, ...]
    peers: tuple[PeerRow, ...]
    other_peers: int  #: endpoints that are not demo nodes (the Spark job's tasks, a `status` call)
    spark: str  #: the Spark job's state, one line
    events: tuple[str, ...]  #: the latest log lines, oldest first


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: max(width - 1, 0)] + "~"


def render(s: Snapshot, width: int = 100, height: int = 40, *, with_events: bool = True) -> list[str]:
    """The view as at most ``height`` lines of at most ``width`` characters (no control codes); the
    latest events fill the lines left, if ``with_events``."""
    lines = [
        f"broker-mqtt demo   {s.broker}   namespace {s.namespace}   {s.elapsed:5.1f} s   (--duration {s.duration:g})",
        f"now: {s.phase}",
        "",
    ]
    for st in s.stores:
        who = st.master if st.master is not None else "- (electing)" if st.running else "-"
        epoch = "-" if st.term is None else str(st.term)
        lines.append(f"store {st.name}  it/master {who:12} epoch {epoch:3} size {st.keys} keys "
                     f"({st.writes} node-log writes, {st.spark_keys} Spark rows){'  [catching up]' if st.stale else ''}")
    lines.append(f"messages/s {s.rate:6}   total {s.total:7}   other endpoints {s.other_peers}")
    lines.append("")
    lines.append(f"{'peer':8}  {'state':8}  {'pid':>7}  {'messages':>8}  {'writes acked':>12}")
    masters = {st.master for st in s.stores}
    for p in s.peers:
        mark = "  <- it/master" if p.name in masters and p.state == "up" else ""
        pid = "-" if p.pid is None else str(p.pid)
        lines.append(f"{p.name:8}  {p.state:8}  {pid:>7}  {p.messages:8}  {p.acked:12}{mark}")
    lines.append(f"{'spark':8}  {s.spark}")
    if not with_events:
        return [_fit(line, width) for line in lines[:height]]
    lines.append("")
    lines.append("events")
    room = max(height - len(lines), 0)
    shown = s.events[-room:] if room else ()
    lines.extend(f"  {e}" for e in shown)
    return [_fit(line, width) for line in lines[:height]]


class Screen:
    """Draws frames of lines on a terminal (alternate screen, redrawn in place)."""

    ENTER = "\x1b[?1049h\x1b[?25l"  # alternate screen, cursor hidden
    LEAVE = "\x1b[?25h\x1b[?1049l"  # cursor shown, normal screen back

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.open = False

    @staticmethod
    def frame(lines: list[str]) -> str:
        """The characters that replace the screen's content with ``lines``: cursor home, each
        line then clear-to-end-of-line, then clear the rest of the screen."""
        return "\x1b[H" + "".join(f"{line}\x1b[K\r\n" for line in lines) + "\x1b[J"

    def draw(self, lines: list[str]) -> None:
        if not self.open:
            self.out.write(self.ENTER)
            self.open = True
        self.out.write(self.frame(lines))
        self.out.flush()

    def close(self) -> None:
        if self.open:
            self.out.write(self.LEAVE)
            self.out.flush()
            self.open = False

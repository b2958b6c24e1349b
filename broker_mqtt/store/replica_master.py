"""The master side of an elected-store replica: applying writes, durability, expiry (``docs/elected-stores.md``).

The master applies each writer's writes once, in ``n`` order (holding those that arrive early),
appends a :class:`~.versioned.Record` to its log per write (consecutive small puts of a writer: one
record, :mod:`.put_batch`), and answers a writer with ``wack`` once the write is durable per
``durability``, counted from the members' ``ack``s. It expires keys by appending ``expire``
records; :mod:`.replica_serving` serves ``fetch`` requests with a tail of its log or a snapshot. This node's own
writes go through its :class:`~.writer_core.WriterCore` like anyone's.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..wire.identity import node_endpoint
from .commands import ComputedCommand, answers_none, decode_command
from .errors import AnswerForgotten, StoreError, StoreProtocolError
from .log_ops import compute_op, forget_ops
from .packing import detached
from .put_batch import batch_length
from .replica_base import MAX_ORIGINS, _Member
from .replica_events import Durability, Role, WriteDone, WriteFailed
from .replica_messages import Ack, Write, WriteAck, Writes, group_writes
from .replica_serving import ServingSide
from .versioned import RESULTS_KEPT, Record
from .writer_core import NoMaster

__all__ = ["MasterSide"]

MAX_UNANSWERED = 65_536  #: answers of applied, not yet durable writes the master keeps per writer
#: tombstone ttls the master forgets nothing for while it serves snapshots, at most: longer, a joiner
#: that never finishes (or never keeps up) would keep every tombstone on every replica; past it, a pass
#: of changes that can no longer name what was forgotten starts over
FORGET_PAUSE_TTLS = 4
LOGGED_WRITERS = 16  #: writers whose last scan of the log for repeats' answers the master keeps (_logged_answer)
MAX_ROUNDS = 1024  #: log messages per writer whose ends the master notes to answer them one by one
#: writers a master keeps its marks of (last answered, first applied, ...) for; past it, those of the
#: 10 % heard first with nothing to answer are forgotten (a Spark job names a writer per task and batch)
MAX_WRITERS_MARKED = 100_000


def _forgotten(writer: str, n: int) -> list[Any]:
    """The answer (as on the wire) of applied write ``n`` of ``writer`` whose answer nobody holds."""
    return ["error", *AnswerForgotten(f"write {n} of {writer} was applied; its answer was forgotten "
                                      f"(neither the last {RESULTS_KEPT} answers kept nor the log hold it)").to_wire()]


class MasterSide(ServingSide):
    """Writes (``write``, ``ack``), durability (``wack``), expiry, own writes (``fetch`` answers:
    :class:`~.replica_serving.ServingSide`)."""

    def _on_ack(self, msg: Ack, now: float) -> None:
        epoch, node, seq = msg.epoch, msg.node, msg.seq
        if self.role is not Role.MASTER or epoch != self.epoch:
            return
        m = self._members.get(node)
        if m is None:
            m = self._members[node] = _Member(now, epoch, (seq, epoch))
        m.seen = now
        m.acked = max(m.acked, seq)
        self._advance_durable()

    def _on_write(self, writer: str, n: int, origin: str, cmd: list[Any], now: float, advance: bool = True) -> None:
        """Apply (or hold) write ``n`` of ``writer``, or answer it again if it is a repeat (``advance``:
        at once; False: the caller advances once for a whole message)."""
        if self.role is not Role.MASTER:
            return
        self._note_origin(writer, origin)
        done = self.state.applied_n(writer)
        if n <= done:  # a repeat (its answer was lost, or it went to an earlier master): answer again
            self._note_repeat(writer, n, cmd)
            acked = self._acked_n.get(writer)
            # a writer first heard of by this master re-sends from its first unanswered write (in n
            # order): what comes before n it holds answered
            self._acked_n[writer] = n - 1 if acked is None else min(acked, n - 1)
            self._unacked[writer] = None
            if acked is None and len(self._acked_n) > MAX_WRITERS_MARKED:
                self._forget_marks()
            if advance:
                self._advance_durable()
            return
        if n > done + 1:
            held = self._held.setdefault(writer, {})
            if len(held) < self.config.max_held:
                held[n] = (origin, cmd)
            return
        self._apply_write(writer, n, origin, cmd)
        waiting = self._held.get(writer)
        if waiting is not None:
            waiting.pop(n, None)  # a copy held before a skip (_skip_answered) made it the next
            while waiting and (self.state.applied_n(writer) + 1) in waiting:
                n = self.state.applied_n(writer) + 1
                self._apply_write(writer, n, *waiting.pop(n))
            if not waiting:
                del self._held[writer]

    def _on_write_msg(self, msg: Write, now: float) -> None:
        if msg.writer == self.id:
            return  # own writes are applied directly when this node is master
        if msg.epoch is None or msg.epoch != self.epoch:
            return  # sent to another mastership (a late arrival after a split): its writer re-sends
        if msg.since is not None:
            self._skip_answered(msg.writer, msg.origin, msg.since)
        self._on_write(msg.writer, msg.n, msg.origin, msg.command, now)

    def _on_writes_msg(self, msg: Writes, now: float) -> None:
        if msg.writer == self.id or msg.epoch is None or msg.epoch != self.epoch:
            return  # own writes, or writes for another mastership (as for one write)
        if msg.since is not None:
            self._skip_answered(msg.writer, msg.origin, msg.since)
        self._on_writes(msg.writer, msg.origin, msg.writes, now, advance=False)
        self._advance_durable()  # once for the message: repeats answered together, not one wack each

    def _on_writes(self, writer: str, origin: str, writes: list[tuple[int, Any]], now: float, *, advance: bool) -> None:
        """Writes of ``writer`` placed together, in n order: consecutive small puts applied as one
        record (:mod:`.put_batch`), the others one by one (:meth:`_on_write`, ``advance`` its). The
        master's only: every replica hears a follower's writes."""
        if self.role is not Role.MASTER:
            return
        i = 0
        while i < len(writes):
            count = 0 if writer in self._held else batch_length(writes, i, self.state.applied_n(writer) + 1)
            if count > 1:
                self._apply_puts(writer, origin, writes[i:i + count])
                i += count
                continue
            n, command = writes[i]
            self._on_write(writer, n, origin, command, now, advance=advance)
            i += 1

    def _note_repeat(self, writer: str, n: int, cmd: Any) -> None:
        """A repeat of applied write ``n`` (command ``cmd``, as on the wire): take its answer now, for
        when it is answered (the state may drop it meanwhile). Its answer is the state's (the last
        RESULTS_KEPT answers of the writer's writes that have one), or this master's (computed and
        not sent yet), or None: a put, an erase or a clear, a write this master applied and has not
        answered, or one no older than the state's oldest kept answer (none was dropped). Otherwise
        it is the answer the log's record of the write holds, while the log holds it; past that it is
        unknown: the write is answered AnswerForgotten, not None (which reads as success, and
        put_unique's as "not inserted")."""
        a = self.state.applied.get(writer)
        if a is None:
            return
        results = a.results
        answer: Any = None
        if n in results:
            answer = results[n]
        elif n in self._unanswered.get(writer, ()):
            return  # sent with this master's other answers
        elif n > self._none_known_after(writer, a) or answers_none(cmd):
            pass  # None, noted now: writes applied before it is answered can make it unknown to _determined
        else:
            answer = self._logged_answer(writer, n, a.n)
        repeats = self._repeat_answers.get(writer)
        if repeats is None:
            repeats = self._repeat_answers[writer] = {}
        repeats[n] = answer
        if len(repeats) > MAX_UNANSWERED:
            del repeats[next(iter(repeats))]

    def _logged_answer(self, writer: str, n: int, last: int) -> Any:
        """The answer of applied write ``n`` of ``writer`` as the log's record of it holds it, else
        AnswerForgotten. Repeats come in bursts, in n order (a writer sends again what it has no
        answer for): the first of a burst scans the log once for writes ``n`` to ``last`` (the
        writer's last applied), and the rest of it is answered from that scan. An answer never
        changes, and a write the scan did not find (the log had dropped it) never comes back into
        the log, so the scan stays true; it is kept for the LOGGED_WRITERS writers scanned last."""
        scan = self._logged_answers.get(writer)
        if scan is None or not scan[0] <= n <= scan[1]:
            scan = (n, last, self._log.results_of(writer, n, last))
            self._logged_answers.pop(writer, None)
            self._logged_answers[writer] = scan
            if len(self._logged_answers) > LOGGED_WRITERS:
                del self._logged_answers[next(iter(self._logged_answers))]
        found = scan[2]
        return found[n] if n in found else _forgotten(writer, n)

    def _none_known_after(self, writer: str, a: Any) -> int:
        """The n after which every applied write of ``writer`` (its applied state ``a``) with no
        kept answer is known to have answered None: one this master applied and has not answered
        (an answer would be in _unanswered), or, while the state's answers were never full, any,
        or one newer than the oldest of them (none dropped since)."""
        results = a.results
        if len(results) < RESULTS_KEPT:
            return 0
        mine: int = max(self._sent_upto.get(writer, 0), self._applied_from.get(writer, a.n + 1) - 1)
        oldest: int = min(results)
        return min(mine, oldest)

    def _determined(self, writer: str, a: Any, acked: int, upto: int) -> tuple[int, int]:
        """The highest n up to ``upto`` such that every write of ``writer`` after ``acked`` up to it
        has a known answer, and the ``after`` of the wack that answers up to there (``acked``, but
        when the hold-back runs out, _forget_unknown's): answering further would answer None for a write whose repeat has not
        arrived yet and whose answer may be forgotten (it is then known when the repeat arrives, in
        n order, _note_repeat). The usual case, every write applied here and none answered, scans
        nothing. It holds a writer back for two retry intervals at most: by then every write the
        writer still waits for came again (it re-sends them all each interval), so what is still
        unknown is answered to a writer that holds its answer already (or, were its repeats lost
        twice, AnswerForgotten: _forget_unknown), never kept waiting."""
        sent = self._sent_upto.get(writer, 0)
        first = self._applied_from.get(writer, a.n + 1)
        if acked >= sent and acked + 1 >= first:
            return upto, acked
        capped = self._cap(writer, a, acked, upto)
        if capped == upto:
            self._held_back.pop(writer, None)
            return upto, acked
        since, at = self._held_back.get(writer, (self._now, capped))
        if capped > at:  # held back at a later write (the writer moved on): a gap of its own, with
            since = self._now  # its own two intervals (a timer left from the last would cut them short)
        self._held_back[writer] = (since, capped)
        if self._now - since >= 2 * self.config.retry_interval:
            del self._held_back[writer]
            return upto, self._forget_unknown(writer, a, capped, upto)
        return capped, acked

    def _forget_unknown(self, writer: str, a: Any, capped: int, upto: int) -> int:
        """The hold-back ran out at ``capped``: returns the ``after`` of the wack that answers up to
        ``upto``. It skips what this master answered before (up to ``_sent_upto``): a writer that
        still waits for some of those writes sees them at or before ``after``, a gap, and sends them
        again, to be answered as repeats; one that holds them (a late copy of an old repeat came)
        gets a short wack, not its whole history again. Each write after that whose answer is still
        unknown is answered from the log's record of it when the log still holds it (a put's None,
        a put_unique's answer), else AnswerForgotten, never None: a writer whose repeats were lost
        twice learns what is true (applied, answer unknown), not a success or a put_unique's "not
        inserted"."""
        after = max(capped, self._sent_upto.get(writer, 0))
        last = min(upto, self._none_known_after(writer, a))
        if after >= last:
            return after
        results, unanswered = a.results, self._unanswered.get(writer, {})
        repeats = self._repeat_answers.get(writer)
        if repeats is None:
            repeats = self._repeat_answers[writer] = {}
        logged = self._log.results_of(writer, after + 1, last)
        for n in range(after + 1, last + 1):
            if n not in results and n not in unanswered and n not in repeats:
                repeats[n] = logged[n] if n in logged else _forgotten(writer, n)
        return after

    def _cap(self, writer: str, a: Any, acked: int, upto: int) -> int:
        """_determined's scan: the last n of (acked, upto] before the first without a known answer."""
        known_after = self._none_known_after(writer, a)
        results = a.results
        unanswered = self._unanswered.get(writer, {})
        repeats = self._repeat_answers.get(writer, {})
        for n in range(acked + 1, upto + 1):
            if n > known_after:
                return upto  # and so is every later one
            if n not in results and n not in unanswered and n not in repeats:
                return n - 1
        return upto

    def _forget_marks(self) -> None:
        """Forget this mastership's marks of the 10 % of writers heard first that have nothing to
        answer (not in _unacked), so that they stay bounded in a long mastership. A forgotten
        writer is as one this master never heard of: its next write or repeat marks it again, and
        its repeats take their answers from the state (_none_known_after no longer counts what this
        master applied before, which only makes _determined scan what it could have skipped)."""
        unacked = self._unacked
        excess = len(self._acked_n) - MAX_WRITERS_MARKED + MAX_WRITERS_MARKED // 10
        forget: list[str] = []
        for writer in self._acked_n:
            if len(forget) >= excess:
                break
            if writer not in unacked:
                forget.append(writer)
        for writer in forget:
            del self._acked_n[writer]
            for marks in (self._applied_from, self._sent_upto, self._held_back, self._held):
                marks.pop(writer, None)

    def _check_acting(self, cmd: Any, origin: str) -> None:
        """Raise StoreError unless a write that acts for a node (``acts_for``) comes from that node's
        endpoint or from a replica's (``origin`` is proven by the topic the write came on)."""
        node = cmd.acts_for() if isinstance(cmd, ComputedCommand) else None
        if node is None or node_endpoint(node) == origin or origin == self.origin:
            return
        if any(node_endpoint(member) == origin for member in self._members):
            return
        raise StoreProtocolError(f"endpoint {origin} may not act for {node} (neither its endpoint nor a replica's)")

    def _apply_write(self, writer: str, n: int, origin: str, cmd_wire: list[Any]) -> None:
        hlc = self.clock.now()  # the record's stamp, and the wall-clock time its expiries count from
        wall = hlc / 1_000_000
        result: Any = None
        failed = self.state.failed  # (set by an earlier read that failed: a local read, raised to its caller)
        try:
            cmd = decode_command(cmd_wire)
            self._check_acting(cmd, origin)
            op, result = compute_op(self.state, cmd, wall)  # type: ignore[arg-type]  # decode_command gives a write here: writers send nothing else
        except StoreError as exc:
            if self.state.failed is not None and self.state.failed is not failed:
                raise self.state.failed from exc  # its file failed while the write was computed: stop
            op, result = ("noop",), ["error", *exc.to_wire()]
        self._append(Record(self.state.last_seq + 1, self.epoch, hlc, origin, writer, n, op, result))  # type: ignore[arg-type]  # epoch: set while master
        self._note_applied(writer, n)
        if result is not None:
            # The state remembers a writer's last RESULTS_KEPT answers (for repeats), but more writes
            # with answers can be applied before they are durable (a round of 256 put_uniques or
            # acquires): each answer is kept here until it is sent, so none is answered as None.
            unanswered = self._unanswered.get(writer)
            if unanswered is None:
                unanswered = self._unanswered[writer] = {}
            unanswered[n] = result
            if len(unanswered) > MAX_UNANSWERED:
                del unanswered[next(iter(unanswered))]  # the oldest: answered from the state's, if it has it

    def _apply_puts(self, writer: str, origin: str, writes: list[tuple[int, Any]]) -> None:
        """Apply consecutive small puts of ``writer``, the next it has (:func:`.put_batch.batch_length`),
        as one record."""
        self._note_origin(writer, origin)
        ops = [("put", command[1], command[2], None) for _, command in writes]
        self._append(Record(self.state.last_seq + 1, self.epoch, self.clock.now(), origin, writer,  # type: ignore[arg-type]  # epoch: set while master
                            writes[-1][0], ("many", ops)), len(writes))
        self._note_applied(writer, writes[0][0])

    def _skip_answered(self, writer: str, origin: str, since: int) -> None:
        """``writer``, sending its unanswered writes again, holds the answers of all before ``since``.
        Those this master never applied were applied (and answered) by an earlier master, and lost
        with it (durability "master", or that master and every replica that held them gone), or were
        given up by their writer before any master applied them (``NoMaster`` after ``write_timeout``:
        outcome unknown, and now known: not applied). One record moves the writer's ``n`` past them
        on every replica (a ``noop`` of write ``since - 1``), so that the writes after them are
        applied, not held for ever for writes their writer will never send again; they are counted
        (``stats.writes_lost``). Nothing is applied twice: those this master did apply are at or
        before its ``n``. A replica's writer (its node id names its endpoint) is believed from its
        own endpoint only; a named writer's name is no identity (``docs/security.md``), as for its writes."""
        done = self.state.applied_n(writer)
        if self.role is not Role.MASTER or since <= done + 1:
            return
        endpoint = node_endpoint(writer)
        if endpoint != writer and len(endpoint) == 32 and endpoint != origin:
            return  # another endpoint speaking for a replica's writer: it would stop its writes applying
        self.stats.writes_lost += since - 1 - done
        held = self._held.get(writer)
        if held is not None:  # copies of writes passed over, held for the lost ones: never applied now
            for n in [n for n in held if n < since]:
                del held[n]
            if not held:
                del self._held[writer]
        self._note_origin(writer, origin)
        self._append(Record(self.state.last_seq + 1, self.epoch, self.clock.now(), origin, writer,  # type: ignore[arg-type]  # epoch: set while master
                            since - 1, ("noop",)))
        self._note_applied(writer, since)

    def _note_origin(self, writer: str, origin: str) -> None:
        """``writer``'s writes come from endpoint ``origin`` (its answers go there); the last
        MAX_ORIGINS writers to move are kept."""
        if self._origins.get(writer) != origin:
            self._origins.pop(writer, None)
            self._origins[writer] = origin
            if len(self._origins) > MAX_ORIGINS:
                del self._origins[next(iter(self._origins))]  # the writer that moved least recently

    def _note_applied(self, writer: str, first: int) -> None:
        """Writes of ``writer`` from ``first`` on were just applied: it has one to answer."""
        if writer not in self._applied_from:  # its first write this mastership applies
            self._applied_from[writer] = first
            # a writer first heard of now holds the answers before first (it re-sends what it has
            # not, in n order, before its new writes: those would be repeats, heard first)
            self._acked_n.setdefault(writer, first - 1)
            self._unacked[writer] = None
            if len(self._acked_n) > MAX_WRITERS_MARKED:
                self._forget_marks()
        self._unacked[writer] = None

    def _append(self, record: Record, writes: int = 1) -> None:
        changes = self.state.apply(record, report=self.wants_data())
        self.stats.records_applied += 1
        self._log.append(record)
        self._out_log.append(record)
        self._out_writes.append(writes)
        if changes:
            self._data_changed(changes)

    def _expire(self, wall: float, now: float) -> None:
        while True:
            nxt = self.state.next_expiry()
            if nxt is None or nxt[0] > wall:
                break
            self._append(Record(self.state.last_seq + 1, self.epoch, self.clock.now(), self.origin,  # type: ignore[arg-type]  # epoch: set while master
                                "$expiry", 0, ("expire", nxt[1])))
        ttl = self.config.tombstone_ttl
        if now - self._snap_served_at < 2 * self.config.fetch_timeout and ttl is not None \
                and now - self._snap_paused_at < FORGET_PAUSE_TTLS * ttl:
            return  # a replica is joining: what it holds from an earlier pass must still be named (above)
        for op in forget_ops(self.state, wall, self.config.tombstone_ttl):  # tombstones past tombstone_ttl
            self._append(Record(self.state.last_seq + 1, self.epoch, self.clock.now(), self.origin,  # type: ignore[arg-type]  # epoch: set while master
                                "$expiry", 0, op))

    def _woke_unconfirmed(self) -> bool:
        """This process woke from a pause (SIGSTOP, a stalled loop: see ``_clock``) less than
        ``member_timeout`` ago. A master of durability "master" then acknowledges only what another
        replica acknowledged (as "one") until that long has passed: it may have been deposed meanwhile,
        and the new master's claim may wait behind the writes it reads first. What it applies so is
        acknowledged to nobody if it then steps down (``_step_down``: dropped for the new master's
        snapshot, not merged over the new master's acknowledged writes)."""
        return self._resumed > self._started and self._now - self._resumed < self.config.member_timeout

    def _advance_durable(self) -> None:
        if self.role is not Role.MASTER:
            return
        last = self.state.last_seq
        if self.durability is Durability.MASTER and not self._woke_unconfirmed():
            durable = last
        else:  # (durability master just after a pause: as "one", below)
            acks = [m.acked for m in self._live_members().values()]
            if not acks:
                durable = self._durable_seq  # no other live replica: nothing more is durable
            elif self.durability is Durability.ONE:
                durable = max(acks)
            else:
                durable = min(acks)
        self._durable_seq = max(self._durable_seq, durable)
        members: dict[str, _Member] | None = None
        answered: list[str] = []
        for writer in list(self._unacked):  # not every writer this master has heard: an ack costs what it answers
            acked = self._acked_n.get(writer, 0)
            a = self.state.applied.get(writer)
            if a is None or a.n <= acked:
                answered.append(writer)  # nothing to answer (forgotten by the state, or answered)
                self._rounds.pop(writer, None)
                if a is None:
                    self._unanswered.pop(writer, None)
                    self._repeat_answers.pop(writer, None)
                    self._held_back.pop(writer, None)
                continue
            if a.seq <= durable:
                upto = a.n
                self._rounds.pop(writer, None)
            else:  # its last write is not durable yet: answer the log messages before it that are
                rounds = self._rounds.get(writer)
                upto = 0
                while rounds and rounds[0][0] <= durable:
                    upto = rounds.popleft()[1]
                if upto <= acked:
                    continue
            upto, after = self._determined(writer, a, acked, upto)
            if after > acked:  # the hold-back ran out: what this master answered before is skipped
                self._acked_n[writer] = acked = after
            if upto <= acked:
                continue  # its next repeat tells what to answer
            if upto == a.n:
                answered.append(writer)
            self._acked_n[writer] = upto
            if upto > self._sent_upto.get(writer, 0):
                self._sent_upto[writer] = upto
            results = {n: r for n, r in a.results.items() if acked < n <= upto}
            unanswered = self._unanswered.get(writer)
            if unanswered:
                sent = []
                for n, r in unanswered.items():  # in n order: past upto nothing is answered yet
                    if n > upto:
                        break
                    sent.append(n)
                    if n > acked:
                        results[n] = r
                for n in sent:
                    del unanswered[n]
                if not unanswered:
                    del self._unanswered[writer]
            repeats = self._repeat_answers.get(writer)
            if repeats:  # the answers of repeats, taken as they arrived (_note_repeat); rare, and few
                for n in [n for n in repeats if n <= upto]:
                    answer = repeats.pop(n)
                    if n > acked and answer is not None:
                        results.setdefault(n, answer)
                if not repeats:
                    del self._repeat_answers[writer]
            if writer == self.id:  # (answers copied: they may hold the state's values, a queue's messages)
                self._writer.answered(upto, {n: detached(r) for n, r in results.items()}, acked)
                self._collect_answers()
            else:
                if members is None:
                    members = self._live_members()
                origin = self._origins.get(writer)
                if writer in members:
                    origin = None  # a replica's writer: answered on the log topic, after the records
                # else a writer without a replica: answered at its endpoint only
                self._send(WriteAck(self.epoch or (0, ""), writer, upto, results, origin, acked))
        for writer in answered:
            del self._unacked[writer]

    def _note_rounds(self, records: list[Record]) -> None:
        """Before the log message of ``records`` goes out: note, for each writer still to answer, its
        last write in it, so that an ack of that message answers the writer up to there even when
        later writes of the same writer are applied (pipelined rounds are answered one by one, not
        all at once when the last is durable)."""
        last = {r.writer: (r.seq, r.n) for r in records}
        rounds = self._rounds
        unacked = self._unacked
        for writer, mark in last.items():
            if writer not in unacked:
                continue  # "$expiry", or answered already (a repeat's record)
            marks = rounds.get(writer)
            if marks is None:
                marks = rounds[writer] = deque()
            marks.append(mark)
            if len(marks) > MAX_ROUNDS:
                marks.popleft()  # the oldest: answered with a later one

    def _pump_writer(self, now: float) -> None:
        """Route this node's own writes: applied here when master, else sent to the master."""
        writes = self._writer.messages()
        if self.role is Role.MASTER:
            if writes:
                if writes[0].since is not None:
                    self._skip_answered(self.id, writes[0].origin, writes[0].since)
                self._on_writes(self.id, writes[0].origin, [(msg.n, msg.command) for msg in writes], now, advance=True)
        elif self.role is Role.FOLLOWER and self.master is not None:
            for grouped in group_writes(writes):  # the writes placed together travel together
                self._send(grouped)
        # else: held by the writer until the next master
        self._collect_answers()

    def _collect_answers(self) -> None:
        for n, result in self._writer.answers():
            if isinstance(result, NoMaster) and self.role is Role.MASTER and not self._live_members():
                result = NoMaster(f"store {self.name!r}: write {n} not acknowledged: this node is master but no "
                                  f"other replica is live to confirm it (durability {self.durability.value!r}; a "
                                  f"single node needs durability='master'; outcome unknown)")
            if isinstance(result, StoreError):
                self._events.append(WriteFailed(n, result))
            else:
                self._events.append(WriteDone(n, result))

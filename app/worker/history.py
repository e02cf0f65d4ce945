"""The transcripts a worker process keeps between the turns it runs: a claim of a conversation
it ran before reads only the messages committed since (`TurnStore.claim`), instead of the whole
history again. An LRU by conversation, of at most `CHATWORKER_HISTORY_CACHE_MB` (each transcript
weighed by its entries and the size of its text: `Transcript.weight`).

Sound because a committed message never changes (the transcript is append-only, messages are
never updated; a deleted conversation's id is never reused), and because a run hands its
transcript back only when it ended normally: every entry in it is committed, and so is the
compaction it sends by. The claim still checks what it knows of the conversation (the latest
compaction, the instructions, the client's tools) and reads everything when they differ. A run
takes its conversation's transcript out while it holds the lease: one user at a time.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

from app.worker.transcript import Transcript


class Histories:
    def __init__(self, megabytes: float) -> None:
        self.limit = int(megabytes * 1024 * 1024)  # bytes, as `Transcript.weight` counts them
        self.weight = 0
        self._kept: OrderedDict[uuid.UUID, tuple[Transcript, int]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, conversation_id: uuid.UUID) -> Transcript | None:
        """The conversation's transcript as its last run here left it (then no longer kept)."""
        with self._lock:
            found = self._kept.pop(conversation_id, None)
            if found is None:
                return None
            self.weight -= found[1]
            return found[0]

    def keep(self, conversation_id: uuid.UUID, transcript: Transcript) -> None:
        """A run ended normally: keep its transcript for the conversation's next claim here."""
        weight = transcript.weight()
        if weight > self.limit:
            return  # larger than the whole cache: the next claim reads it
        with self._lock:
            before = self._kept.pop(conversation_id, None)
            if before is not None:
                self.weight -= before[1]
            self._kept[conversation_id] = (transcript, weight)
            self.weight += weight
            while self.weight > self.limit:
                _, (_, dropped) = self._kept.popitem(last=False)
                self.weight -= dropped

    def __len__(self) -> int:
        return len(self._kept)


__all__ = ["Histories"]

"""The transcripts a worker process keeps between the turns it runs: a claim of a conversation
it ran before reads only the messages committed since (`TurnStore.claim`), instead of the whole
history again. An LRU of at most `CHATWORKER_HISTORY_CACHE_CONVERSATIONS` conversations.

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
    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[uuid.UUID, Transcript] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, conversation_id: uuid.UUID) -> Transcript | None:
        """The conversation's transcript as its last run here left it (then no longer kept)."""
        with self._lock:
            return self._kept.pop(conversation_id, None)

    def keep(self, conversation_id: uuid.UUID, transcript: Transcript) -> None:
        """A run ended normally: keep its transcript for the conversation's next claim here."""
        if self.size <= 0:
            return
        with self._lock:
            self._kept[conversation_id] = transcript
            self._kept.move_to_end(conversation_id)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def __len__(self) -> int:
        return len(self._kept)


__all__ = ["Histories"]

"""Every statement a turn's store runs, as a `Composite` (`journal`): the head, a conversation
UPDATE (the claim's, `claim_statements`; each fenced write's, `fence.HEADS`), and the parts that
also write the step's message, the turn's row and the events describing them, in that order.
"""

from __future__ import annotations

from app.models import (
    ACTION_REQUIRED,
    CANCELLED,
    COMPLETED,
    CONTEXT_COMPACTED,
    MODEL_FALLBACK,
    REQUIRES_ACTION,
    TURN_CANCELLED,
    TURN_COMPLETED,
    TURN_FAILED,
    TURN_FAILED_EVENT,
    TURN_STARTED,
)
from app.worker.store import tree
from app.worker.store.claim_statements import CLAIM, CLAIM_LIMITED
from app.worker.store.event_log import Logged, claim_events, into_tool_loop, log, status_changed
from app.worker.store.fence import ERROR, HEADS, StepKind, Write
from app.worker.store.journal import (
    ACTIONS,
    COMPACTED_DATA,
    COMPACTION_PARAMS,
    ENDED_ID,
    FALLBACK_DATA,
    FALLBACK_MODEL,
    STEERED_DATA,
    TURN_USAGE,
    Composite,
    add_usage,
    committed,
    end_steered,
    end_turn,
    insert_compaction,
    insert_message,
    keep_output,
    promote_message,
    running_turn,
    start_steer,
    start_turn,
)

_CLAIM_PARTS = (
    tree.move_path,
    promote_message,
    start_turn,
    log(claim_events, turn=lambda f: f.c.turn_id),
)
CLAIM_COMPOSITE = Composite(CLAIM, _CLAIM_PARTS)
CLAIM_LIMITED_COMPOSITE = Composite(CLAIM_LIMITED, _CLAIM_PARTS)

COMPOSITES: dict[Write | StepKind, Composite] = {
    Write.HEARTBEAT: Composite(HEADS[Write.HEARTBEAT]),
    Write.STARTING: Composite(HEADS[Write.STARTING]),
    Write.RELEASE: Composite(HEADS[Write.RELEASE]),
    Write.FINISH: Composite(
        HEADS[Write.FINISH],
        (
            end_turn(COMPLETED),
            log(lambda f: [Logged(TURN_COMPLETED), status_changed(f)]),
        ),
    ),
    Write.FAIL: Composite(
        HEADS[Write.FAIL],
        (
            end_turn(TURN_FAILED, error=ERROR),
            log(lambda f: [Logged(TURN_FAILED_EVENT), status_changed(f)]),
        ),
    ),
    Write.PAUSE: Composite(
        HEADS[Write.PAUSE],
        (
            running_turn(status=REQUIRES_ACTION, actions=ACTIONS),
            log(lambda f: [Logged(ACTION_REQUIRED), status_changed(f)]),
        ),
    ),
    Write.CANCEL: Composite(
        HEADS[Write.CANCEL],
        (
            end_turn(CANCELLED),
            log(lambda f: [Logged(TURN_CANCELLED), status_changed(f)]),
        ),
    ),
    Write.COMPACT: Composite(
        HEADS[Write.COMPACT],
        (
            insert_compaction,
            add_usage,
            log(
                lambda f: [
                    Logged(
                        CONTEXT_COMPACTED,
                        message_seq=COMPACTION_PARAMS["through_seq"],
                        data=COMPACTED_DATA,
                    )
                ]
            ),
        ),
    ),
    Write.STEER: Composite(
        HEADS[Write.STEER],
        (
            end_steered,
            insert_message,
            start_steer,
            log(
                lambda f: [
                    Logged(TURN_COMPLETED, turn=ENDED_ID, data=STEERED_DATA),
                    committed(f),
                    Logged(TURN_STARTED, attempt=1),
                    status_changed(f),
                ]
            ),
        ),
    ),
    Write.FALLBACK: Composite(
        HEADS[Write.FALLBACK],
        (
            running_turn(model=FALLBACK_MODEL, **TURN_USAGE),
            log(lambda f: [Logged(MODEL_FALLBACK, data=FALLBACK_DATA)]),
        ),
    ),
    StepKind.REFUSED: Composite(
        HEADS[StepKind.REFUSED],
        (insert_message, add_usage, log(lambda f: [committed(f), status_changed(f)])),
    ),
    StepKind.TOOL_CALLS: Composite(
        HEADS[StepKind.TOOL_CALLS], (insert_message, add_usage, log(lambda f: [committed(f)]))
    ),
    StepKind.TOOL_CALLS_ENTERING: Composite(
        HEADS[StepKind.TOOL_CALLS_ENTERING],
        (insert_message, add_usage, log(lambda f: [committed(f), into_tool_loop()])),
    ),
    StepKind.TOOL_RESULT: Composite(
        HEADS[StepKind.TOOL_RESULT], (insert_message, log(lambda f: [committed(f)]))
    ),
    StepKind.TOOL_RESULT_ENTERING: Composite(
        HEADS[StepKind.TOOL_RESULT_ENTERING],
        (insert_message, log(lambda f: [committed(f), into_tool_loop()])),
    ),
    StepKind.TOOL_OUTPUT: Composite(
        HEADS[StepKind.TOOL_OUTPUT],
        (insert_message, keep_output, log(lambda f: [committed(f)])),
    ),
    StepKind.TOOL_OUTPUT_ENTERING: Composite(
        HEADS[StepKind.TOOL_OUTPUT_ENTERING],
        (insert_message, keep_output, log(lambda f: [committed(f), into_tool_loop()])),
    ),
    StepKind.ANSWER: Composite(
        HEADS[StepKind.ANSWER],
        (
            insert_message,
            end_turn(COMPLETED),
            log(lambda f: [committed(f), Logged(TURN_COMPLETED), status_changed(f)]),
        ),
    ),
}


__all__ = ["CLAIM_COMPOSITE", "CLAIM_LIMITED_COMPOSITE", "COMPOSITES"]

"""Phase, conditions and summary are the operator's alone: its record of them, and undoing foreign writes.

The workload's token may patch the status subresource (it writes status.report
there), so anything in status can be written by it, or by anyone else allowed
to patch acceptancetests/status. The operator therefore keeps its own record of
the status fields it owns in an annotation on the AcceptanceTest: a status
write (to /status) cannot change metadata, so only a writer of the object
itself (the operator, or the test's owner, who can delete it anyway) can touch
the record. The operator decides "finished" from the record, never from
status.phase, and each reconcile first puts back any owned field that differs
from the record.

The record is written before the status it describes: a crash between the two
leaves a record the next reconcile re-applies, never a status without one. The
record also carries a digest of the owned status it replaces (`interrupted`),
so the next reconcile (after a restart) tells its own unfinished write, a
status still as it was before, from a foreign one, and does not report it.

Tests created before the operator kept a record (an upgrade) have owned status
fields and no record. Their status may be the earlier operator's or anyone's
who could patch the status (the workload's token among them), and this
operator cannot tell which, so it adopts them without claiming more than it
knows (`adopted`): a run in progress is recorded as it stands and followed from
its job as any run; a verdict the job contradicts (it still runs) is dropped
and the run followed to its own. A finished verdict of the current generation
whose job agrees that it ended (finished or gone) is not re-run but judged
again: where the status has a report, the handler judges it as it judges any
report and records its own verdict; where it has none, a Failed is kept as
written (a failure claims nothing; its Succeeded condition says it was adopted,
not judged) and a Succeeded does not stand (the handler records ReportMissing).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any

from acceptance_operator.api import GROUP
from acceptance_operator.conditions import TERMINAL_PHASES

KubeDict = dict[str, Any]
RECORD_ANNOTATION = f"{GROUP}/status-record"
OWNED_FIELDS: tuple[str, ...] = (
    "phase", "conditions", "observedGeneration", "startTime", "completionTime", "job", "run", "summary", "history",
    "sweep",
)
MAX_CONDITION_MESSAGE = 8192  # characters; Kubernetes allows 32 KiB, and a status read by people needs less


REPLACES = "replaces"  # in the stored record: digest() of the owned status the write replaces


def digest(status: KubeDict) -> str:
    """A short digest of the owned fields of `status`."""
    text = json.dumps(owned(status), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def encode(owned: KubeDict, replaces: str | None = None) -> str:
    """The record as it is stored: compressed JSON (failedNodes of 1,000 nodes stay small), base64."""
    fields = {k: owned.get(k) for k in OWNED_FIELDS}
    if replaces is not None:
        fields[REPLACES] = replaces
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode(), 9)).decode()


def decode(text: str) -> KubeDict | None:
    try:
        value = json.loads(zlib.decompress(base64.b64decode(text, validate=True)))
    except (ValueError, zlib.error, TypeError):
        return None
    return value if isinstance(value, dict) else None


def _stored(obj: KubeDict) -> KubeDict | None:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(RECORD_ANNOTATION)
    return decode(text) if isinstance(text, str) else None


def record(obj: KubeDict) -> KubeDict | None:
    """The owned status fields as the operator last wrote them; None when it never wrote any (or it is unreadable)."""
    stored = _stored(obj)
    return None if stored is None else {k: v for k, v in stored.items() if k != REPLACES}


def interrupted(obj: KubeDict) -> bool:
    """The status is still what the operator's last write replaced: that write's record landed, its status write
    did not (a restart between the two). Putting the record into status then completes the operator's own write."""
    stored = _stored(obj)
    return stored is not None and stored.get(REPLACES) == digest(obj.get("status") or {})


def owned(status: KubeDict) -> KubeDict:
    return {k: status.get(k) for k in OWNED_FIELDS}


def restoration(obj: KubeDict) -> KubeDict | None:
    """The status patch that puts every owned field back as recorded; None when nothing differs.

    Without a record, no owned field should be set: whatever is there was not
    written by this operator.
    """
    recorded = record(obj) or {k: None for k in OWNED_FIELDS}
    current = owned(obj.get("status") or {})
    changed = {k: recorded.get(k) for k in OWNED_FIELDS if current.get(k) != recorded.get(k)}
    return changed or None


ADOPTED_NOTE = ("(adopted from an operator version that kept no record of the status: a failure without a report, "
                "kept as written, not re-judged by this version; change the spec or give the rerun annotation a new "
                "value to run the test again)")
REJUDGED_NOTE = ("(the verdict of an operator version that kept no record of the status, judged again from its "
                 "report by this version)")


def needs_adoption(obj: KubeDict) -> bool:
    """Owned status fields and no record: the status predates the record (see the module's docstring)."""
    return record(obj) is None and any(value is not None for value in owned(obj.get("status") or {}).values())


def claims_finished(obj: KubeDict) -> bool:
    """The status says the current generation has a verdict (whoever wrote it)."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    return status.get("phase") in TERMINAL_PHASES and status.get("observedGeneration") == generation


def adopted(obj: KubeDict, keep_verdict: bool) -> KubeDict:
    """The record to start from for a status without one.

    A run in progress is kept as it stands. A finished verdict loses its verdict
    fields (the run is followed again, or the handler records its own judgement)
    unless `keep_verdict`; a kept one is marked as adopted in its Succeeded
    condition. A Succeeded is never kept: only a judgement of this version passes.
    """
    kept = owned(obj.get("status") or {})
    if not claims_finished(obj):
        return kept
    if not keep_verdict or kept.get("phase") == "Succeeded":
        return {**kept, "phase": None, "conditions": None, "completionTime": None, "summary": None}
    conditions = []
    for condition in kept.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Succeeded":
            message = f"{condition.get('message') or ''} {ADOPTED_NOTE}".strip()
            condition = {**condition, "message": clip_message(message)}
        conditions.append(condition)
    return {**kept, "conditions": conditions or kept.get("conditions")}


def is_finished(obj: KubeDict) -> bool:
    """The operator has concluded the current generation (by its own record, not by status.phase)."""
    rec = record(obj)
    generation = (obj.get("metadata") or {}).get("generation")
    return rec is not None and rec.get("observedGeneration") == generation and rec.get("phase") in TERMINAL_PHASES


def record_patch(owned_status: KubeDict, replacing: KubeDict | None = None) -> KubeDict:
    """The metadata merge patch that stores the record (`replacing`: the status as read before this write)."""
    replaces = digest(replacing) if replacing is not None else None
    return {"metadata": {"annotations": {RECORD_ANNOTATION: encode(owned_status, replaces)}}}


def clip_message(text: str, limit: int = MAX_CONDITION_MESSAGE) -> str:
    """A condition message within the limit; what is cut says how much."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text) - limit} more characters; `gpu-acceptance report` has the whole report)"
    return text[:limit - len(tail)] + tail

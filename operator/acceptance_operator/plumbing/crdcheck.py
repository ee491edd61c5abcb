"""Is the installed AcceptanceTest CRD this operator's? The fields its served schema lacks, and what fixes it.

Why it matters: the API server prunes fields its CRD's schema does not have.
An operator newer than the installed CRD gets tests whose spec lost every
field it added since (a client that does not validate fields is not even
told), and its own status writes lose theirs. The operator cannot tell which
fields a user had set (they are gone), so while the installed CRD lacks any,
a new run is not started as if nothing were missing: it ends Failed with
reason CRDOutdated naming the fields and the fix (reconcile/start.py). Runs
already going are still judged; readiness is unaffected.

The comparison is pure (field_paths, missing_fields); CrdCheck keeps the
last answer for the threads that read it (the CRD watch writes it).
"""

from __future__ import annotations

import threading
from typing import Any

from acceptance_operator.resource import api

KubeDict = dict[str, Any]
CRD_NAME = f"{api.PLURAL}.{api.GROUP}"
FIX = ("kubectl apply --server-side --force-conflicts -f crds/acceptancetest.yaml (of this operator's version), "
       "or helm upgrade with --set crds.upgrade=true (docs/install.md, Upgrading)")
# Parts of the schema that are the operator's to compare: what users write and what the operator writes.
ROOTS = ("spec", "status")


def field_paths(schema: KubeDict, prefix: str) -> set[str]:
    """Every field path under a structural schema node: `spec.checks.nccl`, list items as `spec.pod.volumes[]`."""
    out: set[str] = set()
    for name, child in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}"
        out.add(path)
        out |= field_paths(child, path)
    items = schema.get("items")
    if isinstance(items, dict):
        out |= field_paths(items, f"{prefix}[]")
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        out |= field_paths(additional, f"{prefix}{{}}")
    return out


def served_schema(crd: KubeDict, version: str = api.VERSION) -> KubeDict | None:
    """The openAPIV3Schema of the served `version`; None when the CRD does not serve it."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version and v.get("served"):
            return ((v.get("schema") or {}).get("openAPIV3Schema")) or {}
    return None


def missing_fields(installed: KubeDict, own: KubeDict) -> list[str]:
    """Field paths of `own` CRD's spec and status that `installed` lacks, outermost only (a missing object's
    fields are not listed again), sorted. A CRD that does not serve this operator's version lacks all of them."""
    theirs = served_schema(installed)
    mine = served_schema(own) or {}
    if theirs is None:
        return [f"{root} (version {api.VERSION} is not served)" for root in ROOTS]
    have: set[str] = set()
    want: set[str] = set()
    for root in ROOTS:
        have |= field_paths((theirs.get("properties") or {}).get(root) or {}, root)
        want |= field_paths((mine.get("properties") or {}).get(root) or {}, root)
    missing = want - have
    return sorted(p for p in missing if not any(p.startswith(q) and p[len(q)] in ".[{" for q in missing if q != p))


def outdated_message(missing: list[str], limit: int = 20) -> str:
    """The condition's message: which fields, why the run is not started, and the command that fixes it."""
    shown = ", ".join(missing[:limit]) + (f" and {len(missing) - limit} more" if len(missing) > limit else "")
    return (f"the installed AcceptanceTest CRD ({CRD_NAME}) is older than this operator: it lacks {shown}. The API "
            "server drops such fields from the tests it stores, so this test's spec may not be what was applied; "
            f"the run is not started. Fix: {FIX}; then apply this test again")


class CrdCheck:
    """The last comparison of the installed CRD with this operator's: None until it was read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._missing: list[str] | None = None

    @property
    def missing(self) -> list[str] | None:
        with self._lock:
            return None if self._missing is None else list(self._missing)

    def update(self, installed: KubeDict | None) -> list[str] | None:
        """Compare `installed` (None: not installed) with this operator's CRD; the missing fields if they changed
        since the last look (None: unchanged)."""
        from acceptance_operator.resource.crd import build_crd

        missing = list(ROOTS) if installed is None else missing_fields(installed, build_crd())
        with self._lock:
            if missing == self._missing:
                return None
            self._missing = missing
            return list(missing)

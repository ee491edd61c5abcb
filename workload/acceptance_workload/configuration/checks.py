"""ChecksSpec (spec.checks): every check's spec model under its name, in the registry's order (checks/registry.py).

Each check's package declares its model (checks/<name>/spec.py) and hands it to its CHECK; this module walks the
registry for them, so adding a check adds its field here, to the WorkloadConfig and to the CRD, with no line here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model

from acceptance_workload.checks.registry import CHECKS
from acceptance_workload.contract.wire import WireModel

if TYPE_CHECKING:
    from acceptance_workload.checks.contract import Check

HEARTBEAT_TIMEOUT_SECONDS = 60  # default: a healthy rank beats every second, so 60 silent seconds is a frozen process


def checks_spec(checks: Iterable[Check]) -> type[WireModel]:
    """The spec.checks model of these checks: the heartbeat, then each check's spec model under its name."""
    fields: dict[str, Any] = {
        "heartbeat_timeout_seconds": (int, Field(
            HEARTBEAT_TIMEOUT_SECONDS, ge=10, le=3600,
            description="A rank whose heartbeat (beaten every second from a thread of its own) is silent this long "
            "is frozen or dead: the run ends naming its node, GPU, rank and step, in any stage and whatever "
            "nccl.collectiveTimeoutSeconds says (that one bounds a collective hung with every rank alive).",
        )),
        # the key is the check's name as it is (camelCase would make "p2p" "p2P")
        **{c.name: (c.spec, Field(default_factory=c.spec, alias=c.name)) for c in checks},
    }
    return create_model("ChecksSpec", __base__=WireModel, __module__=__name__, **fields)


ChecksSpec: type[WireModel] = checks_spec(CHECKS)
# Off unless the spec enables them: the checks whose spec model's `enabled` defaults to False.
OPT_IN_CHECKS: tuple[str, ...] = tuple(c.name for c in CHECKS if not c.spec.model_fields["enabled"].default)

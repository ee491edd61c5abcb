"""kopf handlers: turn each AcceptanceTest into one job per generation and follow it to a verdict.

The handlers only orchestrate: they read the test, its job, pods and events,
let pure functions decide (backends.build_children, assessment.assess,
conditions.conditions_for, verdict.summarize, node_actions.node_patch) and
write the outcome. Nothing polls: watch events about a test, its child job,
the job's pods or the run's evidence ConfigMaps (server-side label selectors)
put the test's key in a work queue (workqueue.py), and worker threads run the
same level-based reconcile for each key, which reads the test afresh and is
safe to repeat: children are adopted when they exist, the job name carries the
generation, and a finished generation is left alone, so an operator restart
neither re-runs a finished test nor starts a second job for a running one.

The code lives in the package acceptance_operator.reconcile, one module per
lifecycle step: events (kopf's entry points), loop (one reconcile of a test),
start (a run's children), follow (judging a run from its job, pods and
delivered report), sweeping (a sweep's child tests), status (the status write
and the verdict), delete (a deleted test's children), runtime (what they
share: settings, metrics, the work queue, teststate.States). This module loads
it, so `kopf run -m acceptance_operator.handlers` and `gpu-acceptance operator`
register the same handlers, and keeps the names the runner and tests use.
"""

from __future__ import annotations

import kopf  # noqa: F401  # tests patch kopf.info/kopf.warn through this name

from acceptance_operator.plumbing.workqueue import WorkQueue  # noqa: F401
from acceptance_operator.reconcile import events  # noqa: F401  # registers the kopf handlers
from acceptance_operator.reconcile.events import on_test_event  # noqa: F401
from acceptance_operator.reconcile.follow import delivered_part as _delivered  # noqa: F401
from acceptance_operator.reconcile.follow import observe_run as _observe  # noqa: F401
from acceptance_operator.reconcile.loop import reconcile, reconcile_safely  # noqa: F401
from acceptance_operator.reconcile.runtime import GONE as _gone  # noqa: F401
from acceptance_operator.reconcile.runtime import METRICS, SETTINGS, STATES  # noqa: F401
from acceptance_operator.reconcile.runtime import awaits_run as _awaits_run  # noqa: F401
from acceptance_operator.reconcile.runtime import effective as _effective  # noqa: F401
from acceptance_operator.reconcile.status import conclude as _conclude  # noqa: F401
from acceptance_operator.reconcile.status import write_status as _write_status  # noqa: F401
from acceptance_operator.resource import runs  # noqa: F401
from acceptance_operator.resource.api import RERUN_ANNOTATION, parse_test  # noqa: F401
from acceptance_operator.resource.conditions import RunState, is_finished  # noqa: F401

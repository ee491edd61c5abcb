"""A fault injected from outside the workload: put this directory on PYTHONPATH and Python imports it at start-up.

TEST_FAULT="MODULE:ATTR:RANK:AFTER:EXCEPTION:TEXT" replaces MODULE's ATTR (dotted for a method, e.g.
Trainer.step) in the process whose RANK it is, once MODULE is imported (at once for one already imported, such
as os), with a wrapper that calls the real one AFTER times and then raises EXCEPTION(TEXT) on every later call:
EXCEPTION is a builtin exception (OSError, RuntimeError) or an errno name (ENOSPC, EIO, EROFS: an OSError with
that errno and the system's text) or a library's exception by its dotted name (torch.OutOfMemoryError).
TEXT may hold colons. The workload has no hook for this: the test changes the function from
outside, as a faulty library, driver or disk would make it raise.
"""

from __future__ import annotations

import builtins
import errno
import functools
import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Any

SPEC = os.environ.get("TEST_FAULT", "")


def _error(name: str, text: str) -> BaseException:
    code = getattr(errno, name, None)
    if isinstance(code, int) and name.startswith("E"):
        return OSError(code, os.strerror(code))
    if "." in name:  # a library's own exception, e.g. torch.OutOfMemoryError (what CUDA raises on a full GPU)
        module, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(module), attr)(text)
    return getattr(builtins, name)(text)


def _broken(real: Any, after: int, exc: str, text: str) -> Any:
    calls = [0]

    @functools.wraps(real)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > after:
            raise _error(exc, text)
        return real(*args, **kwargs)
    return wrapper


def _patch(module: Any, attr: str, after: int, exc: str, text: str) -> None:
    *owner_path, last = attr.split(".")
    owner = module
    for part in owner_path:
        owner = getattr(owner, part)
    setattr(owner, last, _broken(getattr(owner, last), after, exc, text))


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, attr: str, after: int, exc: str, text: str):
        self.module, self.attr, self.after, self.exc, self.text = module, attr, after, exc, text

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _patch(module, self.attr, self.after, self.exc, self.text)

        spec.loader.exec_module = exec_module
        return spec


if SPEC:
    _module, _attr, _rank, _after, _exc, _text = SPEC.split(":", 5)
    if os.environ.get("RANK") == _rank and _module in sys.modules:
        _patch(sys.modules[_module], _attr, int(_after), _exc, _text)
    elif os.environ.get("RANK") == _rank:
        sys.meta_path.insert(0, _Finder(_module, _attr, int(_after), _exc, _text))

"""The exception hierarchy: unexpected failures only.

Expected outcomes (an unparseable verdict, an empty winner group, an abstention) are values on the
result types, never exceptions.
"""

from __future__ import annotations


class ReflectRMError(Exception):
    """Base class of every error ReflectRM raises on purpose."""


class ConfigError(ReflectRMError, ValueError):
    """A configuration value is invalid; the message names the field, the value and the fix."""


class InputError(ReflectRMError, ValueError):
    """User input (a pair, a data file line) is invalid; the message names the problem and the fix."""


class OutputBusy(InputError):
    """Another run is writing the same output (it holds the output's lock): this run wrote nothing."""


class RoleError(InputError):
    """A person's role (`reflectrm reviewers`) does not allow what they asked: the message names role and fix."""


class BackendError(ReflectRMError):
    """A backend could not load a model or could not do what was asked."""


class ContextLengthError(BackendError, InputError):
    """A prompt does not fit in the model's context window."""


class DiskFull(ReflectRMError):
    """The disk filled up while writing (a checkpoint, a report); the message names where and how to go on."""


class ModelFolderError(BackendError, InputError):
    """A model folder lacks a file a loader needs, or holds a damaged one; the message names it and the fix."""


class DeviceError(BackendError, InputError):
    """A device that this machine or its torch build lacks (`--device cuda` on a CPU build)."""


class Cancelled(ReflectRMError):
    """The work was stopped on request (a Stop button, Ctrl-C); nothing half-done was recorded."""


class GenerationCancelled(Cancelled):
    """A backend stopped generating because its `should_stop` callback said so (checked every decode step)."""


class MissingDependencyError(ReflectRMError, ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


def first_line(exc: BaseException) -> str:
    """An exception's message as one line (its first), or its type's name when it says nothing."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def require(module: str, *, extra: str) -> object:
    """Import an optional dependency or raise a `MissingDependencyError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError(
            f"{module!r} is not installed: install it with `pip install 'reflectrm[{extra}]'`"
        ) from exc

"""epk's exceptions. Every error carries epkd's (or libepk's) message as its text and a short ``code`` attribute
(``not-found``, ``no-space``, ``corrupt-tile``, ``io``, ...)."""


class Error(Exception):
    """Base of every epk error."""

    code: str = "internal"


class NotFound(Error, LookupError):
    """An unknown model, tensor or device (or a handle this client does not hold)."""


class NoSpace(Error):
    """epkd's budget cannot hold the tensor without evicting slots that are pinned."""


class QuotaExceeded(NoSpace):
    """This client is over its own quota in epkd (pinned bytes, or pins of one tensor); the budget may have room."""


class PermissionDenied(Error, PermissionError):
    """epkd's access rules refuse this process (its uid and groups, as the kernel reports them) or this model."""


class DecodeError(Error):
    """The tensor could not be produced: a corrupt tile or checksum in the model file."""


class Unsupported(Error):
    """A layout this tensor cannot be served in (or a feature this daemon or build lacks)."""


class InvalidArgument(Error, ValueError):
    """A bad argument: an unknown layout, a name too long, a bad stream."""


class CudaError(Error):
    """A CUDA driver call failed."""


class ConnectionLost(Error, ConnectionError):
    """The connection to epkd broke (the daemon stopped or restarted). This Client is finished; a new Client
    connects again. Leases of the old connection are gone: epkd dropped their pins."""


class Unavailable(Error, ConnectionError):
    """No epkd listens on the socket (or it could not be reached)."""


class Closed(Error):
    """A call on a Client after close()."""


class Released(Error):
    """A lease used after release()."""


__all__ = [
    "Error", "NotFound", "NoSpace", "QuotaExceeded", "PermissionDenied", "DecodeError", "Unsupported", "InvalidArgument", "CudaError", "ConnectionLost",
    "Unavailable", "Closed", "Released",
]

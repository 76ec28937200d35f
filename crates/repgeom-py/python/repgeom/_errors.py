"""Exceptions raised by repgeom. Every one derives from :class:`repgeom.Error`."""

import builtins

__all__ = ["Error", "InvalidInputError", "FileNotFoundError", "IOError", "InternalError"]


class Error(Exception):
    """Base class of every error repgeom raises (messages are the command line's)."""


class InvalidInputError(Error, builtins.ValueError):
    """Bad input or options: wrong shape, non-finite values, unknown metric, bad option value."""


class FileNotFoundError(Error, builtins.FileNotFoundError):  # noqa: A001 - deliberate subclass
    """A file or checkpoint directory that does not exist."""


class IOError(Error, builtins.OSError):  # noqa: A001 - deliberate subclass
    """The operating system refused a read (permissions, a directory where a file was expected)."""


class InternalError(Error):
    """A bug in repgeom (a Rust panic caught at the boundary). Please report it."""

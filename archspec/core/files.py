"""A user's file, opened for reading: one answer for every floor that reads one (a spec, a
checkpoint, a resume file), so each refuses the same things in the same words.

    special_file(mode)          what a file that is not a regular file is ("a named pipe (FIFO)")
    read_regular_file(path, n)  at most n + 1 bytes, a FIFO or device refused without blocking
    open_regular(path)          a binary file object for reading, a FIFO or device refused without blocking
    file_problem(path)          why a path names no regular file we can read, in words; None if it does
    new_file_mode()             the mode open() gives a new file (the umask's; mkstemp's is 0600)
"""

from __future__ import annotations

import errno
import os
import stat

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class SpecialFile(OSError):
    """The path names a FIFO, socket or device, which a spec or checkpoint never is."""


def special_file(mode: int) -> str | None:
    """What a file that is not a regular file is ("a named pipe (FIFO)"); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str):
    """The regular file at `path`, open for reading in binary (a blocking file object, for
    torch.load, PIL and the rest). A FIFO, socket or device is refused before anything is read:
    it is opened non-blocking, so a FIFO with no writer cannot hang us, and fstat'ed, so a path
    swapped for a FIFO after a stat cannot either. IsADirectoryError for a folder, SpecialFile
    for the rest, OSError for what cannot be opened (missing, unreadable)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        what = special_file(os.fstat(fd).st_mode)
        if what is not None:
            raise IsADirectoryError(errno.EISDIR, what) if what == "a directory" else SpecialFile(what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path`. A FIFO, socket or device is refused
    without reading (see open_regular); OSError for the rest (missing, unreadable)."""
    with open_regular(path) as f:
        return f.read(limit + 1)


def file_problem(path: str) -> tuple[str, str] | None:
    """Why `path` names no regular file we may read, as (kind, words): kind is "missing",
    "folder", "special" or "unreadable", the words say it after the path ("is a named pipe
    (FIFO)", "cannot be read: permission denied"). None when it does. Nothing is opened."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "missing", "does not exist"
    except (OSError, ValueError) as exc:
        return "unreadable", f"cannot be read: {getattr(exc, 'strerror', None) or exc}"
    what = special_file(info.st_mode)
    if what == "a directory":
        return "folder", "is a directory"
    if what is not None:
        return "special", f"is not a regular file ({what})"
    if not os.access(path, os.R_OK):
        return "unreadable", "cannot be read: permission denied"
    return None


def new_file_mode() -> int:
    """The mode open() would give a new file: 0666 less the umask (mkstemp's, and safetensors', is 0600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask

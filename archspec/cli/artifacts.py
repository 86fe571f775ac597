"""The output folder of `archspec build`, written so that nothing is ever half there or lost.

A build writes into a fresh staging folder beside the target (`.NAME.archspec-partial-PID-XXXX`)
and, once every artifact is written, puts it in place in one step: a rename when the target
does not exist, else an atomic exchange of the two folders (Linux renameat2 RENAME_EXCHANGE;
elsewhere two renames, with a moment where the target is absent). So a reader that opens the
folder sees one complete build, the old or the new, never a mix; a build that fails or is
interrupted leaves the previous build as it was (or none) and removes its staging folder.

The folder is archspec's: `manifest.json` lists the regular files a build wrote (size and
sha256 of each; a file in a subfolder by its relative path, `mappings/hf_llama.yaml`: a model
folder's copies of the mapping files its spec names, and a subfolder is archspec's when every
file in it is one it wrote, unchanged). The next build replaces them, so an artifact it does not write again
(`model.onnx` after an `--target eager` rebuild) is gone; anything else found in the folder,
a file the user put there or an artifact the user edited since, is carried into the new
folder (an edited artifact the new build writes again is kept beside it as NAME.edited).
Nothing archspec did not write is ever deleted, and the manifest is not taken on its word:
only a regular file whose sha256 is the one recorded is replaced or removed, never a folder,
a link or a file the record does not pin down (kept as NAME.kept when the new build writes
one of its name). A manifest.json that archspec could not have written (an entry that is a
folder, a record without size or hash, no JSON) is a usage error naming it; a folder from
before manifests (archspec's report.json, no manifest) is replaced with all of its files kept.
A non-empty folder that is no archspec build is refused, not replaced. What archspec reads in
the folder it reads only from regular files, opened non-blocking (a FIFO cannot hang a build).

Builds into the same target commit one at a time (a lock on the parent folder); staging
folders of builds killed outright (SIGKILL, power loss) are cleaned by a later build.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..core.errors import UsageError
from ..core.files import special_file

MANIFEST = "manifest.json"
PARTIAL_MARKER = ".archspec-partial"  # in a staging folder: everything here is this build's
MAX_JSON_BYTES = 64 << 20  # a manifest.json or legacy report.json larger than this is none of ours
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_STAGING = re.compile(r"\.(?P<name>.+)\.archspec-(?:partial|old)-(?P<pid>\d+)-[A-Za-z0-9_]+\Z")


# -- the target ------------------------------------------------------------------------------------


def resolve_target(path: str) -> str:
    """The folder a build goes to: symbolic links followed; a usage error for one it cannot be."""
    target = os.path.realpath(os.path.abspath(path))
    parent = os.path.dirname(target)
    if parent == target:
        raise UsageError(f"-o {path}: the root of the file system cannot be a build folder")
    if os.path.lexists(target) and not os.path.isdir(target):
        raise UsageError(f"-o {path}: {target} exists and is not a folder; give a folder for the artifacts")
    longest = name_max(parent)
    if len(os.fsencode(os.path.basename(target))) > longest:
        raise UsageError(f"-o {path}: the folder's name is longer than this file system allows ({longest} bytes)")
    cwd = os.path.realpath(os.getcwd())
    if os.path.isdir(target) and (cwd == target or cwd.startswith(target + os.sep)):
        raise UsageError(f"-o {path}: a build replaces its folder whole, and you are inside {target}; "
                         "run archspec from another folder")
    return target


def name_max(folder: str) -> int:
    """The longest file name the file system of `folder` (or its nearest existing parent) takes."""
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        return os.pathconf(folder or "/", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def check_replaceable(target: str, shown: str) -> None:
    """An existing target must be a build folder (or empty) that archspec may replace."""
    if not os.path.isdir(target):
        return
    if not os.access(target, os.W_OK | os.X_OK):
        raise UsageError(f"-o {shown}: cannot write into {target}: permission denied")
    try:
        previous = previous_build(target)
    except ForgedManifest as exc:
        raise UsageError(f"-o {shown}: {os.path.join(target, MANIFEST)} is no manifest archspec wrote: {exc}; "
                         "archspec replaces nothing on its word: remove it if the folder is yours, or give a new "
                         "folder") from None
    if os.listdir(target) and previous is None:
        raise UsageError(f"-o {shown}: {target} holds files archspec did not write and is no archspec build "
                         f"folder (it has no {MANIFEST}); give a new or empty folder, so that nothing of yours "
                         "is replaced")


def make_parent(parent: str, shown: str) -> None:
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"-o {shown}: {parent} exists and is not a folder") from None
    except OSError as exc:
        raise UsageError(f"-o {shown}: cannot create {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"-o {shown}: cannot write into {parent}: permission denied")


# -- what a folder holds -----------------------------------------------------------------------------


class ForgedManifest(Exception):
    """A manifest.json that archspec could not have written; the message says why."""


class NotRegular(OSError):
    """The path is no regular file (a folder, link, FIFO, socket or device): archspec does not read it."""


@dataclass
class Previous:
    """An existing build folder: which of its entries archspec wrote, and which it wrote as they are now."""

    files: dict[str, dict] = field(default_factory=dict)  # name -> manifest record {"bytes", "sha256"}

    def ours(self, folder: str, name: str) -> bool:
        """Whether entry `name` is archspec's artifact, unchanged since archspec wrote it: a regular
        file of the recorded size and sha256 (a record without a hash pins nothing down: not ours),
        or a subfolder (no link) every entry of which is such a file, listed by its relative path."""
        if name == MANIFEST:
            return True
        record = self.files.get(name)
        if record is not None:
            return "sha256" in record and not edited(os.path.join(folder, name), record)
        path = os.path.join(folder, name)
        if not any(listed.startswith(name + "/") for listed in self.files) or not is_real_folder(path):
            return False
        found = relative_files(path, name)
        return found is not None and all(self.ours(folder, inner) for inner in found)


def previous_build(folder: str) -> Previous | None:
    """The build in `folder` by its manifest (ForgedManifest for one archspec could not have
    written); a folder of an archspec from before manifests (it holds archspec's report.json)
    with nothing known to be archspec's; None for any other."""
    manifest = read_manifest(folder)
    if manifest is not None:
        return Previous(manifest)
    if is_archspec_report(os.path.join(folder, "report.json")):
        return Previous({})  # no hashes: every file in it is kept
    return None


def read_json(path: str):
    """The JSON value in the regular file at `path` (read non-blocking); NotRegular for a FIFO,
    folder, link or device, OSError when unreadable, ValueError when no JSON or too large."""
    with open_regular(path) as f:
        raw = f.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise ValueError(f"larger than {MAX_JSON_BYTES >> 20} MiB")
    return json.loads(raw.decode("utf-8"))


def is_archspec_report(path: str) -> bool:
    """Whether `path` is a report.json that archspec wrote (its FLOP convention says so)."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "flops_convention" in data and isinstance(data.get("nodes"), list)


def read_manifest(folder: str) -> dict[str, dict] | None:
    """name -> record from folder/manifest.json; None when there is none; ForgedManifest when
    it is no manifest archspec wrote (see manifest_files)."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.lexists(path):
        return None
    try:
        data = read_json(path)
    except NotRegular as exc:
        raise ForgedManifest(f"it is {exc.strerror}, not a file") from None
    except OSError as exc:
        raise ForgedManifest(f"it cannot be read ({exc.strerror or exc})") from None
    except ValueError:
        raise ForgedManifest("it is not JSON text") from None
    return manifest_files(data, folder)


def is_real_folder(path: str) -> bool:
    """A folder, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def relative_files(folder: str, prefix: str) -> list[str] | None:
    """The entries under `folder` as `prefix/...` paths, or None when one is no regular file or
    folder (a link, a FIFO): such a folder is not archspec's."""
    found = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if is_real_folder(path):
            inner = relative_files(path, f"{prefix}/{name}")
            if inner is None:
                return None
            found += inner
        elif file_kind(os.lstat(path).st_mode) is None:
            found.append(f"{prefix}/{name}")
        else:
            return None
    return found


def plain_relative_name(name) -> bool:
    """A file name, or a relative path of file names under folders (`mappings/hf.yaml`): no '.',
    '..' or empty part, no backslash or NUL, not the manifest."""
    if not isinstance(name, str) or name == MANIFEST or "\0" in name or "\\" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def manifest_files(data, folder: str) -> dict[str, dict]:
    """The files a manifest lists, each checked to be what archspec writes: a plain file name (or
    a relative path under real folders), a record of its size (and sha256), and in the folder a
    regular file or nothing."""
    if not isinstance(data, dict) or data.get("written_by") != "archspec build" or not isinstance(data.get("files"), dict):
        raise ForgedManifest('it has no `"written_by": "archspec build"` and `files` table')
    for name, record in data["files"].items():
        if not plain_relative_name(name):
            raise ForgedManifest(f"its entry {name!r} is no file name archspec writes")
        problem = record_problem(record)
        parts = name.split("/")
        for depth in range(1, len(parts)):  # every folder on the way a real one (or none)
            above = os.path.join(folder, *parts[:depth])
            if problem is None and os.path.lexists(above) and not is_real_folder(above):
                problem = f"lies under {'/'.join(parts[:depth])}, which is no folder"
        if problem is None:
            problem = entry_problem(os.path.join(folder, name))
        if problem is not None:
            raise ForgedManifest(f"its entry {name!r} {problem}")
    return dict(data["files"])


def record_problem(record) -> str | None:
    """What is wrong with a manifest record (archspec writes {"bytes": N, "sha256": HEX}); None if nothing."""
    if not isinstance(record, dict) or not isinstance(record.get("bytes"), int) or isinstance(record["bytes"], bool) \
            or record["bytes"] < 0:
        return "has no size (archspec records the size and sha256 of every file it writes)"
    if "sha256" in record and not (isinstance(record["sha256"], str) and _SHA256.match(record["sha256"])):
        return "has a sha256 that is no sha256"
    return None


def entry_problem(path: str) -> str | None:
    """Why the entry at `path` cannot be an artifact archspec wrote (it writes regular files only)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None  # listed, since removed: nothing to replace
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    what = file_kind(mode)
    return None if what is None else f"is {what}, and archspec writes only files"


def file_kind(mode: int) -> str | None:
    """What an entry that is no regular file is ("a folder"); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a folder" if stat.S_ISDIR(mode) else special_file(mode) or "not a regular file"


def open_regular(path: str):
    """A binary file object for the regular file at `path`: opened non-blocking and without
    following a link, so a FIFO with no writer cannot hang the build; NotRegular otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise NotRegular(exc.errno, "a symbolic link", path) from None
        raise
    what = file_kind(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise NotRegular(errno.EINVAL, what, path)
    return os.fdopen(fd, "rb")


def record_of(path: str) -> dict:
    """What the manifest keeps of an artifact: its size and sha256."""
    return {"bytes": os.lstat(path).st_size, "sha256": file_sha256(path)}


def edited(path: str, record: dict) -> bool:
    """Whether the artifact at `path` changed since its manifest record was taken (or is no
    regular file now)."""
    try:
        if os.lstat(path).st_size != record.get("bytes"):
            return True
        return file_sha256(path) != record.get("sha256")
    except OSError:
        return True


def file_sha256(path: str) -> str:
    """sha256 of the regular file at `path` (NotRegular for anything else)."""
    digest = hashlib.sha256()
    with open_regular(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- one build's output --------------------------------------------------------------------------------


class OutputDir:
    """The staging folder of one build and its commit into the target.

        out = OutputDir.prepare("build/swin_t")   # usage errors before any work
        ... write into out.staging ...
        files = out.commit(info)                 # or out.discard() on failure
    """

    def __init__(self, target: str, staging: str, shown: str):
        self.target, self.staging, self.shown = target, staging, shown
        self.committed = False
        self.manifest_bytes = 0  # the manifest's size, once commit wrote it
        self.notes: list[str] = []  # what the commit did that the user should know

    @classmethod
    def prepare(cls, path: str) -> "OutputDir":
        target = resolve_target(path)
        parent = os.path.dirname(target)
        make_parent(parent, path)
        check_replaceable(target, path)
        try:
            staging = tempfile.mkdtemp(prefix=staging_prefix(target, "partial"), dir=parent)
        except OSError as exc:
            raise UsageError(f"-o {path}: cannot write into {parent}: {exc.strerror or exc}") from None
        with open(os.path.join(staging, PARTIAL_MARKER), "w", encoding="utf-8") as f:
            f.write(f"archspec build {os.getpid()}: partial output, removed when the build ends\n")
        return cls(target, staging, path)

    def recorded(self, path: str) -> str:
        """A file the user named (the spec, the weights) as the artifacts record it: as named when
        relative (to the folder the build ran in), else relative to this build folder; never an
        absolute path of the user's machine."""
        return path if not os.path.isabs(path) else self.relative(path)

    def relative(self, path: str) -> str:
        """`path` relative to this build folder (as the user named it), so that the folder and
        the files beside it can move together."""
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.shown))

    def path(self, name: str) -> str:
        """Where the build writes artifact `name`."""
        return os.path.join(self.staging, name)

    def discard(self) -> None:
        """Remove the staging folder (the build failed or was interrupted); the target is untouched."""
        if not self.committed:
            shutil.rmtree(self.staging, ignore_errors=True)

    def commit(self, info: dict | None = None) -> dict[str, dict]:
        """Write the manifest and put the staging folder in place of the target, atomically;
        carry over what was not archspec's. Returns the manifest's files (name -> record)."""
        os.remove(os.path.join(self.staging, PARTIAL_MARKER))
        files = {name: record_of(os.path.join(self.staging, name)) for name in staged_files(self.staging)}
        write_json(os.path.join(self.staging, MANIFEST), {"written_by": "archspec build", "files": files,
                                                          **({"build": info} if info else {})})
        self.manifest_bytes = os.lstat(os.path.join(self.staging, MANIFEST)).st_size  # said once the folder is in place
        # the lock first: a build waiting for another's commit can still be interrupted
        with locked(os.path.dirname(self.target)), signals_held():
            clean_stale(os.path.dirname(self.target), os.path.basename(self.target))
            check_replaceable(self.target, self.shown)  # another build may have put something there since
            try:
                old = self.swap_in()
            except OSError as exc:  # the system refused (a full disk, a read-only mount): nothing was replaced
                raise UsageError(f"-o {self.shown}: cannot put the build in place at {self.target}: "
                                 f"{exc.strerror or exc}") from None
            self.committed = True
            if old is not None:
                self.carry_over(old)
                leftovers = remove_build(old)
                if leftovers:
                    self.notes.append(f"could not remove the previous build's {', '.join(leftovers)} from {old}")
        return files

    def swap_in(self) -> str | None:
        """Put the staging folder at the target; the old target's folder (now elsewhere), if any."""
        self.match_mode()
        try:
            os.rename(self.staging, self.target)  # no target yet (or an empty folder): one rename
            return None
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        if exchange(self.staging, self.target):
            return self.staging
        old = tempfile.mkdtemp(prefix=staging_prefix(self.target, "old"), dir=os.path.dirname(self.target))
        os.rmdir(old)
        os.rename(self.target, old)  # no atomic exchange here: the target is absent for a moment
        os.rename(self.staging, self.target)
        return old

    def match_mode(self) -> None:
        """The new folder gets the old one's permissions (a fresh one: the umask's), not mkdtemp's 0700."""
        try:
            mode = stat.S_IMODE(os.stat(self.target).st_mode)
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o777 & ~umask
        os.chmod(self.staging, mode)

    def carry_over(self, old: str) -> None:
        """Move what the old folder holds that archspec did not write (or that was edited since)
        into the new one, under a free name if the new build wrote one of the same name."""
        previous = trusted_previous(old)
        for name in sorted(os.listdir(old)):
            if previous.ours(old, name):
                continue
            destination = name
            if os.path.lexists(os.path.join(self.target, name)):
                hashed = "sha256" in previous.files.get(name, {})  # archspec's, changed since: edited
                destination = free_name(self.target, f"{name}.edited" if hashed else f"{name}.kept")
                self.notes.append(f"kept your {name} as {destination}")
            os.rename(os.path.join(old, name), os.path.join(self.target, destination))


def staged_files(staging: str) -> list[str]:
    """The regular files the build wrote into `staging`, by relative path (a subfolder's files too;
    the partial marker is gone by then)."""
    found = []
    for name in sorted(os.listdir(staging)):
        path = os.path.join(staging, name)
        if is_real_folder(path):
            found += relative_files(path, name) or []
        elif file_kind(os.lstat(path).st_mode) is None:
            found.append(name)
    return found


def trusted_previous(folder: str) -> Previous:
    """The previous build in `folder` as far as it can be trusted: a forged manifest, or none, trusts nothing."""
    try:
        return previous_build(folder) or Previous()
    except ForgedManifest:
        return Previous()


def short_name(name: str) -> str:
    """The target's name as staging folders carry it (short enough for any file system)."""
    return name[:100]


def staging_prefix(target: str, kind: str) -> str:
    """`.NAME.archspec-KIND-PID-`: beside the target, hidden, and telling whose it is."""
    return f".{short_name(os.path.basename(target))}.archspec-{kind}-{os.getpid()}-"


def free_name(folder: str, name: str) -> str:
    candidate, n = name, 1
    while os.path.lexists(os.path.join(folder, candidate)):
        n += 1
        candidate = f"{name}.{n}"
    return candidate


def remove_build(folder: str) -> list[str]:
    """Remove a build folder's own entries, then the folder if that left it empty; what could not go.
    A staging folder (it holds the partial marker) is all archspec's; in an old build folder
    (carry_over has moved the rest out) only the regular files whose size and sha256 are the
    manifest's records go, and the manifest; a folder without a trustworthy manifest keeps all."""
    if os.path.exists(os.path.join(folder, PARTIAL_MARKER)):
        shutil.rmtree(folder, ignore_errors=True)
        return []
    try:
        previous = previous_build(folder)
    except ForgedManifest:
        previous = None
    left = []
    names = sorted(os.listdir(folder), key=lambda n: n != MANIFEST)  # the manifest first: no longer a build
    for name in names if previous is not None else ():
        path = os.path.join(folder, name)
        if not previous.ours(folder, name) or (entry_problem(path) is not None and not is_real_folder(path)):
            left.append(name)  # never a link, nor a folder that holds anything but archspec's files
            continue
        try:
            shutil.rmtree(path) if is_real_folder(path) else os.remove(path)
        except OSError:
            left.append(name)
    if previous is None:  # nothing in it is known to be archspec's
        left = sorted(os.listdir(folder))
    if not left:
        try:
            os.rmdir(folder)
        except OSError:
            pass
    return left


def clean_stale(parent: str, name: str) -> None:
    """Remove the staging folders of builds of `name` whose process is gone (killed outright)."""
    for entry in os.listdir(parent):
        match = _STAGING.match(entry)
        if match and match["name"] == short_name(name) and not process_alive(int(match["pid"])):
            remove_build(os.path.join(parent, entry))


def process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def write_json(path: str, data) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


# -- the system calls ----------------------------------------------------------------------------------


def exchange(a: str, b: str) -> bool:
    """Swap the paths `a` and `b` atomically (Linux renameat2 with RENAME_EXCHANGE); False where
    the system or the file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), b)


@contextmanager
def locked(folder: str):
    """An exclusive lock on `folder` (flock on the folder itself: no lock file is left behind)."""
    try:
        import fcntl
    except ImportError:  # no flock on this system: commits are still atomic, just not serialised
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def signals_held():
    """SIGINT and SIGTERM wait while the folders are swapped (delivered right after)."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

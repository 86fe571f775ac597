"""Which files a spec may name: the rule for `extends:` and `mappings:` paths.

A spec is untrusted text, and a file it names is read and, when wrong, quoted in the error.
So a spec may name only YAML files (`.yaml`, `.yml`) inside one of these folders:

- the folder of the spec being checked (the one given on the command line or to the API;
  the current folder for a spec given as text) and everything below it;
- archspec's own specs folder (the shipped architectures and their mapping files: the
  repository's specs/, or archspec/specs/ in an installed wheel; core/shipped.py);
- the folders listed in the environment variable ARCHSPEC_PATH (separated like PATH).

A path is judged where it really leads (symbolic links followed), so a link cannot lead out.
Never allowed, even inside those folders: a hidden file or folder (a name starting with a
dot, below the allowed folder), anything under /proc, /sys or /dev. A file outside the rule
is refused before it is opened or even looked for, so an error never quotes it and never says
whether it exists. `--map FILE` and the spec file itself are the user's own choice on the
command line, not the spec's, and are not limited by this rule.
"""

from __future__ import annotations

import os

from ..core.errors import Loc, SpecError, error
from ..core.shipped import shipped_folder

SEARCH_PATH_VARIABLE = "ARCHSPEC_PATH"
YAML_SUFFIXES = (".yaml", ".yml")
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")
SHIPPED_SPECS = shipped_folder()  # where the shipped specs are (core/shipped.py says)


def spec_folder(root_file: str) -> str:
    """The folder whose tree the spec at `root_file` may read: its own (the current folder for
    a spec given as text)."""
    return os.path.dirname(os.path.abspath(root_file)) if os.path.isfile(root_file) else os.getcwd()


def allowed_folders(root_file: str) -> list[str]:
    """The real paths of the folders a spec may name files in (see the module's docstring)."""
    folders = [spec_folder(root_file), SHIPPED_SPECS]
    folders += [f for f in os.environ.get(SEARCH_PATH_VARIABLE, "").split(os.pathsep) if f]
    return [os.path.realpath(os.path.abspath(os.path.expanduser(f))) for f in folders]


def _inside(path: str, folder: str) -> str | None:
    """`path` relative to `folder` when it is inside it; None when it is not."""
    if path == folder:
        return None
    prefix = folder.rstrip(os.sep) + os.sep
    return path[len(prefix):] if path.startswith(prefix) else None


def why_refused(path: str, root_file: str) -> str | None:
    """Why a spec whose tree is `root_file`'s may not name the file at `path`; None when it may."""
    real = os.path.realpath(path)
    if any(real == s or real.startswith(s + os.sep) for s in SYSTEM_FOLDERS):
        return "it is a system file (under /proc, /sys or /dev)"
    if not real.endswith(YAML_SUFFIXES):
        return "it is not a YAML file (.yaml or .yml)"
    inner = [rel for rel in (_inside(real, f) for f in allowed_folders(root_file)) if rel is not None]
    if not inner:
        return "it is outside the folders a spec may read"
    if all(any(part.startswith(".") for part in rel.split(os.sep)) for rel in inner):
        return "it is a hidden file (or in a hidden folder)"
    return None


def named_file(name: str, named_by: str, root_file: str, loc: Loc | None, what: str) -> str:
    """The path of the file `name` that the file `named_by` names (relative to its folder), for
    the spec at `root_file`; a located SpecError when the rule above refuses it. `what` is the
    key that named it (`extends`, `mappings`)."""
    folder = os.path.dirname(named_by) if os.path.isfile(named_by) else os.getcwd()
    path = os.path.normpath(os.path.join(folder, name))  # as the user named the spec: errors show it so
    reason = why_refused(os.path.abspath(path), root_file)
    if reason is not None:
        raise refusal(name, reason, root_file, loc, what)
    return path


def refusal(name: str, reason: str, root_file: str, loc: Loc | None, what: str) -> SpecError:
    """The error for a path the rule refuses; it names the path as the spec wrote it, nothing read."""
    return error(f"{what}: {name!r} cannot be read: {reason}", loc,
                 hint=f"a spec may name YAML files in its own folder ({spec_folder(root_file)}) and below, or in "
                      f"archspec's specs folder; add other folders to {SEARCH_PATH_VARIABLE} (see README, Security)")

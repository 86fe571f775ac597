"""Sharded training state on disk under --fsdp: a torch.distributed.checkpoint (DCP) folder.

`--save DIR` under --fsdp writes DIR as DCP does: each process its shards (__RANK_0.distcp) and
rank 0 the .metadata index. It holds tensors only: "model.NAME" for the model's tensors,
"optimizer.state.NAME.ENTRY" for the optimizer's per-parameter state, "step" (the steps taken);
the optimizer's hyperparameters are the run's, as with the single file (state.py). It is written
into a hidden folder beside DIR and put in place when every process is done, so a crash leaves
the old DIR as it was.

`--resume DIR` reads it at any world size (DCP reshards on load: saved by two processes, resumed
by one or by four), in one process without FSDP too. Before anything is loaded, .metadata is read
with an unpickler that builds only DCP's own metadata classes, torch dtypes and sizes (the stock
reader unpickles it unrestricted, which could run code from a crafted folder), and checked against
this run: every tensor this model and optimizer need, by name and shape, none of them stored as
pickled bytes. The tensors themselves DCP reads with torch.load(weights_only=True); once loaded
they are checked finite on every process together. Every fault is a SpecError naming the folder.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import warnings
from contextlib import contextmanager

import torch

from ..core.errors import error
from ..core.files import open_regular
from .options import MAX_STEPS
from .state import listing, shape_text

METADATA = ".metadata"
SAVED_BY = "a folder that `archspec train --fsdp --save` wrote"
DCP = "torch.distributed.checkpoint"
ALLOWED = {  # what a DCP .metadata pickle may build
    f"{DCP}.metadata": {"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "TensorProperties",
                        "ChunkStorageMetadata", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"},
    f"{DCP}.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes, torch dtypes and sizes; refuses anything else."""

    def find_class(self, module: str, name: str):
        if name in ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")


def read_metadata(folder: str):
    path = os.path.join(folder, METADATA)
    try:
        with open_regular(path) as f:
            metadata = MetadataUnpickler(io.BytesIO(f.read())).load()
    except Exception as exc:  # noqa: BLE001 - any unreadable index is the user's to fix
        raise fault(folder, f"cannot read its {METADATA} safely: {str(exc).splitlines()[0] if str(exc) else exc}")
    if not hasattr(metadata, "state_dict_metadata"):
        raise fault(folder, f"its {METADATA} is not {DCP}'s index")
    if getattr(metadata, "storage_meta", None) is None:
        from torch.distributed.checkpoint.metadata import StorageMeta

        metadata.storage_meta = StorageMeta()
    return metadata


def fault(folder: str, message: str, hint: str | None = None):
    return error(f"--resume {folder}: {message}", hint=hint or f"give {SAVED_BY} for this spec and --set sizes")


def reader(folder: str):
    """DCP's file reader with the safe metadata reader above."""
    from torch.distributed.checkpoint import FileSystemReader

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            metadata = read_metadata(folder)
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(folder)


# -- what is saved --------------------------------------------------------------------------------------


def flat_state(model_state: dict, optimizer_state: dict, step: int) -> dict:
    """The tensors DCP writes (see the module's docstring)."""
    return {"model": model_state, "optimizer": {"state": optimizer_state.get("state", {})},
            "step": torch.tensor(step, dtype=torch.int64)}


def expected_entries(state: dict, prefix: str = "") -> dict[str, tuple]:
    """The DCP keys of a nested state and the global shapes of its tensors."""
    entries = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            entries.update(expected_entries(value, name + "."))
        elif isinstance(value, torch.Tensor):
            entries[name] = tuple(value.shape)
    return entries


def check_entries(metadata, expected: dict[str, tuple], folder: str) -> None:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    stored = metadata.state_dict_metadata
    missing = [name for name in expected if name not in stored]
    if missing:
        model = [n for n in missing if n.startswith("model.")]
        what = "model tensors" if model else "optimizer state or step"
        raise fault(folder, f"lacks {len(missing)} of this run's {what} ({listing(missing)})",
                    hint="was it saved from another spec, with other --set sizes or another --optimizer? Resume "
                         "with the same ones")
    kept = [name for name in stored if name.startswith("optimizer.") and name not in expected]
    if kept:
        raise fault(folder, f"holds optimizer state this run's optimizer does not keep ({listing(kept)})",
                    hint="resume with the --optimizer the folder was saved with")
    for name, shape in expected.items():
        entry = stored[name]
        if not isinstance(entry, TensorStorageMetadata):
            raise fault(folder, f"{name} is stored as pickled bytes, not a tensor")
        if tuple(entry.size) != shape:
            raise fault(folder, f"{name} is {shape_text(entry.size)} in the folder and {shape_text(shape)} in this run",
                        hint="was it saved with other --set sizes? Resume with the sizes it was saved with")


# -- writing and reading --------------------------------------------------------------------------------------


def save(folder: str, state: dict, world) -> None:
    """Every process writes its shards into a hidden folder beside `folder`; rank 0 puts it in place."""
    import torch.distributed.checkpoint as dcp

    folder = os.path.abspath(folder.rstrip(os.sep) or folder)
    partial = os.path.join(os.path.dirname(folder), f".{os.path.basename(folder)}.partial")
    if world.rank == 0:
        shutil.rmtree(partial, ignore_errors=True)
    barrier(world)
    with quiet(world):
        dcp.save(state, checkpoint_id=partial, no_dist=not world.distributed)
    barrier(world)
    if world.rank == 0:
        old = partial + ".old"
        if os.path.exists(folder):
            os.replace(folder, old)
        os.replace(partial, folder)
        shutil.rmtree(old, ignore_errors=True)
    barrier(world)


def load(folder: str, state: dict, world) -> int:
    """Fill `state` (this run's, sharded as this run shards it) from the folder; the step it reached."""
    import torch.distributed.checkpoint as dcp

    check_entries(read_metadata(folder), expected_entries(state), folder)
    try:
        with quiet(world):
            dcp.load(state, storage_reader=reader(folder), no_dist=not world.distributed)
    except Exception as exc:  # noqa: BLE001 - a damaged shard file
        raise fault(folder, f"cannot load it: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}") \
            from None
    check_finite(state, folder, world)
    step = int(state["step"])
    if not 0 <= step <= MAX_STEPS:
        raise fault(folder, f"its step is {step}; the step a run reached is a whole number from 0 to {MAX_STEPS:,}")
    return step


def check_finite(state: dict, folder: str, world) -> None:
    """Every process checks its shards; all stop together when any holds NaN or infinity."""
    bad = [name for name, value in tensors(state) if value.is_floating_point() and
           not bool(torch.isfinite(local(value)).all())]
    flag = torch.tensor(1.0 if bad else 0.0)
    if world.distributed:
        import torch.distributed as dist

        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if float(flag):
        where = listing(bad) if bad else "a shard another process holds"
        raise fault(folder, f"holds NaN or infinite values ({where})",
                    hint="a run that diverged saved it; resume from an earlier one or start afresh")


def tensors(state: dict, prefix: str = ""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from tensors(value, f"{prefix}{key}.")
        elif isinstance(value, torch.Tensor):
            yield f"{prefix}{key}", value


def local(value: torch.Tensor) -> torch.Tensor:
    return value.to_local() if hasattr(value, "to_local") else value


@contextmanager
def quiet(world):
    """In one process DCP warns that it assumes one process; that is the intent here."""
    with warnings.catch_warnings():
        if not world.distributed:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def barrier(world) -> None:
    if world.distributed:
        import torch.distributed as dist

        dist.barrier()

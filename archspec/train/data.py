"""Where a training run's samples come from (`--data`), read by well-kept libraries.

    (no --data)        the synthetic set: DATASET samples drawn once from the seed, cycled in order
    --data DIR         DIR/train/CLASS/* and DIR/val/CLASS/*: torchvision's ImageFolder, with
                       transforms fit to the spec's image size (image_transform): up to 64 px
                       no augmentation by default and never 8%-area crops (--aug basic: a shift
                       and flip), larger timm's create_transform; --aug none/basic/rand/trivial
    --data FILE        a flat token file, as nanoGPT keeps them: .npy (1-D integers, numpy.load with
                       mmap) or .bin (raw uint16, numpy.memmap); windows of the spec's sequence length
                       (its largest), each with the next tokens as targets; the last --val-fraction
                       of the file is the validation set
    --data mod:fn      your own: `fn()` from module `mod` (importable from the current folder or
                       installed) returns a torch Dataset (the last --val-fraction is held out) or a
                       (train, val) pair; for a classify head each item is (image, class); for an lm
                       head (ids,) or (ids, next_ids); or a dict keyed by the spec's input (and
                       target) names, with "label" (a classify head's class) or "next" (an lm head's
                       next tokens, optional). Hugging Face `datasets` fit here.

Each item becomes a dict keyed by the spec's input names ("__labels__": a classify head's class,
"__next__": an lm head's next tokens). Each step takes a global batch of indices (a new
permutation every epoch, drawn from the seed and the epoch; the synthetic set in order), and each
process its share of it, so a resumed run or one under torchrun sees the batches of a straight run
in one process. What is wrong with the data's contents (no images, a class folder without any,
more classes than the head has, tokens beyond the vocabulary, a hook that fails) is a SpecError
naming --data.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from ..compiler.backends.export import value_bound
from ..core.errors import UsageError, error
from ..core.files import SpecialFile, file_problem, open_regular
from .batch_memory import size
from .options import DATASET, TRAIN_EXTRA, Options, data_kind

LABELS, NEXT = "__labels__", "__next__"
KEYS = {LABELS: "label", NEXT: "next"}  # what a hook's dict items call them
SMALL_IMAGE = 64  # px: inputs up to this size get shifts and flips, never 8%-area crops
GOLDEN = 0x9E3779B97F4A7C15  # spreads (seed, epoch) over torch's seed range


@dataclass
class Data:
    kind: str  # synthetic, images, tokens, hook
    train: Dataset
    val: Dataset | None
    classes: list[str] | None = None  # an image folder's class names

    @property
    def shuffled(self) -> bool:
        return self.kind != "synthetic"

    def describe(self) -> dict:
        sizes = {"kind": self.kind, "train": len(self.train), "val": len(self.val) if self.val is not None else 0}
        return {**sizes, "classes": self.classes} if self.classes else sizes


# -- the spec's side ------------------------------------------------------------------------------------------


@dataclass
class Needs:
    """What the model reads and the objective compares with."""

    inputs: list[str]
    targets: list[str]  # the spec's targets (objectives), or LABELS / NEXT
    shape: list  # the first input's shape without the batch
    kind: str  # objectives, classify, lm
    bound: int | None = None  # classes of a classify head, vocabulary of an lm head


def needs_of(graph, objective) -> Needs:
    first = graph.inputs()[0]
    shape = list(first.type.shape[1:])
    if objective.kind == "classify":
        return Needs(objective.inputs, [LABELS], shape, "classify", objective.classes)
    if objective.kind == "lm":
        return Needs(objective.inputs, [NEXT], shape, "lm", value_bound(graph, first.name))
    return Needs(objective.inputs, list(objective.targets), shape, "objectives")


# -- items as dicts --------------------------------------------------------------------------------------------


class Named(Dataset):
    """A dataset whose items are dicts keyed by the spec's names (tuples zipped with `names`)."""

    def __init__(self, dataset, names: list[str]):
        self.dataset, self.names = dataset, names

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict:
        item = self.dataset[index]
        if isinstance(item, dict):
            return {name: as_tensor(item[key_of(name)]) for name in self.names if key_of(name) in item}
        if not isinstance(item, (tuple, list)):
            item = (item,)
        return {name: as_tensor(value) for name, value in zip(self.names, item)}


def key_of(name: str) -> str:
    return KEYS.get(name, name)


def as_tensor(value):
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


class Synthetic(Dataset):
    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors

    def __len__(self) -> int:
        return DATASET

    def __getitem__(self, index: int) -> dict:
        return {name: values[index] for name, values in self.tensors.items()}


# -- the sources ----------------------------------------------------------------------------------------------


def load_data(options: Options, needs: Needs, synthetic: dict[str, torch.Tensor]) -> Data:
    """The run's training and validation sets (see the module's docstring)."""
    if options.data is None:
        return Data("synthetic", Synthetic(synthetic), None)
    kind = data_kind(options.data)
    data = {"images": image_folders, "tokens": token_file, "hook": hook}[kind](options, needs)
    if len(data.train) == 0:
        raise error(f"--data {options.data}: the training set is empty")
    return data


def image_folders(options: Options, needs: Needs) -> Data:
    if needs.kind != "classify" or len(needs.shape) != 3 or needs.shape[0] != 3:
        raise UsageError(f"--data {options.data}: an image folder trains a spec with a classify head and an image "
                         f"input [B, 3, H, W]; give a token file or module:function for this one")
    try:
        from torchvision.datasets import ImageFolder
    except ImportError as exc:
        raise UsageError(f"--data with an image folder needs torchvision and timm ({exc}): {TRAIN_EXTRA}") from None
    size_hw = (size(needs.shape[1]), size(needs.shape[2]))
    transforms = {True: image_transform(size_hw, options.aug, training=True),
                  False: image_transform(size_hw, options.aug, training=False)}
    sets = {}
    for split, training in (("train", True), ("val", False)):
        transform = transforms[training]
        folder = os.path.join(options.data, split)
        try:
            sets[split] = ImageFolder(folder, transform=transform, loader=load_image,
                                      is_valid_file=lambda path: is_image_file(options.data, path))
        except OSError as exc:  # FileNotFoundError: a class folder without images
            raise error(f"--data {options.data}: {split}/: {first_line(exc)}",
                        hint="every class folder needs at least one image (.png, .jpg, ...)") from None
    classes = sets["train"].classes
    if sets["val"].classes != classes:
        raise error(f"--data {options.data}: val/ has the classes {', '.join(sets['val'].classes)} and train/ "
                    f"{', '.join(classes)}; give both the same class folders")
    if len(classes) > needs.bound:
        raise error(f"--data {options.data}: {len(classes)} classes, and the spec's head has {needs.bound}",
                    hint=f"add --set classes={len(classes)} (or the spec's param for its classes)")
    names = [needs.inputs[0], LABELS]
    return Data("images", Named(sets["train"], names), Named(sets["val"], names), classes)


def default_aug(size_hw: tuple[int, int]) -> str:
    """The augmentation a run takes without --aug: none up to SMALL_IMAGE px (no crop to scale
    down, and shifts and flips do not suit every small-image set: digits and letters are not
    mirror images; --aug basic asks for them), basic (timm's transforms) above."""
    return "none" if max(size_hw) <= SMALL_IMAGE else "basic"


def image_transform(size_hw: tuple[int, int], aug: str | None, training: bool):
    """The transform of an image folder's samples at the model's input size (timm's train.py as
    the reference, scaled to the images):

        small (<= SMALL_IMAGE px)  training: resize to the input, then basic = shift by up to 1/8
                                   (zero-padded random crop) and flip; validation: resize only;
                                   without --aug: none
        larger                     timm's create_transform: training basic = random-resized crop
                                   (8% to 100% of the area), flip, colour jitter; validation:
                                   resize and centre crop
        rand / trivial             basic, then RandAugment (timm's rand-m9-mstd0.5-inc1) or
                                   TrivialAugmentWide (torchvision)
        none                       the validation transform
    ImageNet's mean and std at every size."""
    from timm.data import create_transform
    from timm.data.constants import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    from torchvision import transforms as T

    aug = aug or default_aug(size_hw)
    small = max(size_hw) <= SMALL_IMAGE
    if not small and (not training or aug != "trivial"):
        augment = {"rand": "rand-m9-mstd0.5-inc1"}.get(aug) if training else None
        return create_transform(input_size=(3, *size_hw), is_training=training and aug != "none",
                                auto_augment=augment)
    finish = [T.ToTensor(), T.Normalize(IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)]
    if not small:  # trivial at a larger size: timm's crop and flip, then TrivialAugmentWide
        from timm.data.transforms import RandomResizedCropAndInterpolation

        return T.Compose([RandomResizedCropAndInterpolation(size_hw), T.RandomHorizontalFlip(),
                          T.TrivialAugmentWide(), *finish])
    steps = [T.Resize(size_hw)]
    if training and aug != "none":
        pad = max(1, min(size_hw) // 8)
        steps += [T.RandomCrop(size_hw, padding=pad), T.RandomHorizontalFlip()]  # zero-padded, as CIFAR's
        if aug == "rand":
            from timm.data.auto_augment import rand_augment_transform

            steps.append(rand_augment_transform("rand-m9-mstd0.5-inc1", {"img_mean": (124, 116, 104)}))
        elif aug == "trivial":
            steps.append(T.TrivialAugmentWide())
    return T.Compose(steps + finish)


def is_image_file(data: str, path: str) -> bool:
    """Whether ImageFolder takes `path` as an image: its extension says so (torchvision's list); one
    with an image's name that is no regular file (a FIFO `x.png`) is refused by name, unopened."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    if not path.lower().endswith(IMG_EXTENSIONS):
        return False
    problem = file_problem(path)
    if problem is not None and problem[0] in ("special", "folder"):
        raise error(f"--data {data}: {os.path.relpath(path, data)} {problem[1]}, not an image",
                    hint="an image folder holds image files only; remove it or give it another name")
    return True


def load_image(path: str):
    """torchvision's pil_loader, with the file opened by open_regular (a FIFO put in place after
    the folder was listed is refused, never waited on)."""
    from PIL import Image

    try:
        f = open_regular(path)
    except SpecialFile as exc:
        raise error(f"--data: {path} is not a regular file ({exc}), not an image") from None
    with f:
        return Image.open(f).convert("RGB")


def token_file(options: Options, needs: Needs) -> Data:
    if needs.kind != "lm":
        raise UsageError(f"--data {options.data}: a token file trains a spec with an lm head; give an image folder "
                         f"or module:function for this one")
    tokens = read_tokens(options.data)
    length = longest(needs.shape[0])
    windows = (len(tokens) - 1) // length
    if windows < 2 and options.val_fraction > 0 or windows < 1:
        raise error(f"--data {options.data}: {len(tokens)} tokens make {windows} window(s) of {length} + 1; "
                    f"give a longer file")
    largest = int(tokens.max())
    if largest >= needs.bound or int(tokens.min()) < 0:
        raise error(f"--data {options.data}: it holds the token {largest}, beyond the vocabulary of {needs.bound}",
                    hint="add --set vocab=... (or the spec's param for its vocabulary)")
    held = math.ceil(windows * options.val_fraction) if options.val_fraction else 0
    held = min(held, windows - 1)
    train = Windows(tokens, length, 0, windows - held)
    val = Windows(tokens, length, windows - held, windows) if held else None
    names = [needs.inputs[0], NEXT]
    return Data("tokens", Named(train, names), Named(val, names) if val else None)


def read_tokens(path: str):
    import numpy

    try:
        if path.endswith(".npy"):
            tokens = numpy.load(path, mmap_mode="r", allow_pickle=False)
        else:
            tokens = numpy.memmap(path, dtype=numpy.uint16, mode="r")
    except (OSError, ValueError) as exc:
        raise error(f"--data {path}: cannot read it as tokens: {first_line(exc)}",
                    hint=".npy: a 1-D array of integers; .bin: raw uint16 tokens (nanoGPT's format)") from None
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise error(f"--data {path}: holds a {tokens.ndim}-D array of {tokens.dtype}, not a 1-D array of integer "
                    f"tokens")
    return tokens


def longest(d) -> int:
    """A sequence length: the spec's, at its largest where it is symbolic."""
    return d if isinstance(d, int) else d.hi


class Windows(Dataset):
    """Windows first..last of `length` tokens, each with the `length` tokens after its first."""

    def __init__(self, tokens, length: int, first: int, last: int):
        self.tokens, self.length, self.first, self.count = tokens, length, first, last - first

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        if not 0 <= index < self.count:
            raise IndexError(index)
        start = (self.first + index) * self.length
        chunk = torch.from_numpy(self.tokens[start:start + self.length + 1].astype("int64"))
        return chunk[:-1], chunk[1:]


def hook(options: Options, needs: Needs) -> Data:
    """`fn()` of `mod` for --data mod:fn (named by the user on the command line, never by a spec)."""
    module_name, function_name = options.data.split(":")
    function = import_hook(module_name, function_name, options.data)
    try:
        made = function()
    except Exception as exc:  # noqa: BLE001 - the user's code; its fault is theirs to see
        raise error(f"--data {options.data}: {function_name}() raised {type(exc).__name__}: {first_line(exc)}") \
            from None
    if isinstance(made, tuple) and len(made) == 2:
        train, val = made
    else:
        train, val = split_off(made, options.val_fraction)
    names = list(needs.inputs) + list(needs.targets)
    optional = 1 if needs.kind == "lm" else 0
    for which, dataset in (("training", train), ("validation", val)):
        if dataset is not None:
            check_items(dataset, names, optional, options.data, which)
    return Data("hook", Named(train, names), Named(val, names) if val is not None else None)


def import_hook(module_name: str, function_name: str, data: str):
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--data {data}: cannot import {module_name}: {first_line(exc)} (module:function names a "
                         f"module in the current folder or installed)") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(f"--data {data}: {module_name} has no function {function_name}")
    return function


def split_off(dataset, fraction: float):
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise error(f"--data: the function returned a {type(dataset).__name__}, not a torch Dataset (with "
                    f"__len__ and __getitem__) or a (train, val) pair")
    held = min(math.ceil(len(dataset) * fraction), len(dataset) - 1) if fraction else 0
    kept = len(dataset) - held
    return Subset(dataset, range(kept)), (Subset(dataset, range(kept, len(dataset))) if held else None)


def check_items(dataset, names: list[str], optional: int, data: str, which: str) -> None:
    """The first item has what the spec reads: a dict with its names, or a tuple of them in order."""
    if len(dataset) == 0:
        return
    try:
        item = dataset[0]
    except Exception as exc:  # noqa: BLE001 - the user's dataset
        raise error(f"--data {data}: reading its first {which} item raised {type(exc).__name__}: "
                    f"{first_line(exc)}") from None
    wanted = " and ".join(key_of(n) for n in names)
    if isinstance(item, dict):
        missing = [key_of(n) for n in names[:len(names) - optional] if key_of(n) not in item]
        if missing:
            raise error(f"--data {data}: its {which} items lack {', '.join(missing)}; each is a dict of {wanted}")
        return
    count = len(item) if isinstance(item, (tuple, list)) else 1
    if not len(names) - optional <= count <= len(names):
        raise error(f"--data {data}: its {which} items hold {count} value(s); this spec takes {len(names)} "
                    f"({wanted}), in that order")


def first_line(exc: BaseException) -> str:
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return (text or type(exc).__name__)[:300]


# -- batches --------------------------------------------------------------------------------------------------


class StepBatches:
    """A batch sampler: for each step from `start` to `end`, this process's share of the global
    batch (the synthetic set cycled in order; real data in a fresh permutation each epoch)."""

    def __init__(self, length: int, batch: int, start: int, end: int, seed: int, shuffled: bool, rank: int = 0,
                 processes: int = 1):
        self.length, self.batch, self.start, self.end = length, batch, start, end
        self.seed, self.shuffled, self.rank, self.share = seed, shuffled, rank, batch // processes
        self.per_epoch = max(1, length // batch) if shuffled else None

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self):
        order, epoch = None, None
        for step in range(self.start, self.end):
            if self.shuffled and self.epoch_of(step) != epoch:
                epoch = self.epoch_of(step)
                order = self.permutation(epoch)
            rows = self.rows(step, order)
            yield rows[self.rank * self.share:(self.rank + 1) * self.share]

    def epoch_of(self, step: int) -> int | None:
        return step // self.per_epoch if self.shuffled else None

    def permutation(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed((self.seed + GOLDEN * (epoch + 1)) % 2**64)
        return torch.randperm(self.length, generator=generator).tolist()

    def rows(self, step: int, order) -> list[int]:
        if not self.shuffled:
            first = step * self.batch
            return [(first + j) % self.length for j in range(self.batch)]
        first = (step % self.per_epoch) * self.batch
        return order[first:first + self.batch]


def training_batches(data: Data, options: Options, start: int, end: int, rank: int, processes: int) -> DataLoader:
    sampler = StepBatches(len(data.train), options.batch, start, end, options.seed, data.shuffled, rank, processes)
    return DataLoader(data.train, batch_sampler=sampler, num_workers=options.workers,
                      persistent_workers=False)


@dataclass
class Validation:
    """This process's share of the validation set, and how many forwards every process runs."""

    loader: DataLoader  # every processes-th sample from this process's rank, in batches of its --batch share
    forwards: int  # the most batches any process has (rank 0's): under FSDP2 each forward needs every process
    filler: DataLoader  # one sample, run and left out by a process with fewer batches, to match the others


def validation_batches(data: Data, options: Options, rank: int, processes: int) -> Validation | None:
    """The validation set split between the processes (each evaluates its own samples; the sums
    are added up across processes afterwards), or None when there is none."""
    if data.val is None or len(data.val) == 0:
        return None
    share = max(1, options.batch // processes)
    mine = Subset(data.val, range(rank, len(data.val), processes))
    forwards = math.ceil(math.ceil(len(data.val) / processes) / share)  # rank 0 has the most samples
    loader = DataLoader(mine, batch_size=share, shuffle=False, num_workers=options.workers)
    return Validation(loader, forwards, DataLoader(Subset(data.val, [0]), batch_size=1))


def steps_per_epoch(data: Data, batch: int) -> int:
    """Whole global batches in one pass over the training set (a partial last one is dropped)."""
    if data.shuffled and len(data.train) < batch:
        raise UsageError(f"--batch {batch} is larger than the training set ({len(data.train)} samples); give at most "
                         f"{len(data.train)}")
    return max(1, len(data.train) // batch)

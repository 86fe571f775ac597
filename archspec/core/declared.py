"""Declared, validated records without pydantic: the parameter models of the ops and the spec
document's structure. (Importing pydantic and building its validators was half of a cold
`archspec check`; this module imports nothing outside the standard library.)

    class WindowParams(Params):                      # Params is a Model
        window: PositiveInt = Field(7, description="side of a square window")
        pad: Union[bool, Literal["before_norm"]] = False

A `Model` declares its fields as annotated class attributes, with a default or a `Field(...)`.
`Model.model_validate(data)` checks a mapping strictly (an int refuses bools and floats, a float
takes ints, a list is a list; unknown keys and missing keys are errors) and returns a frozen
instance with pydantic's model API: `model_fields`, `model_fields_set`, `model_dump`,
`model_copy(update=)`, equality and hashing by value. A failure raises `ValidationError`, whose
`.errors()` are the dicts pydantic 2 gives for the same declaration (type, loc, msg, input, ctx:
tests/core/test_declared.py compares the two on the real models), so language/validation.py
words either. The annotations understood: int, float, bool, str, Any, None, Literal, list[...],
dict[..., ...], Union / Optional, Annotated[..., Field(...)] and nested Models; anything else
fails loudly when the model is first used. `pydantic_model(cls)` builds the same model in
pydantic, on demand, for the JSON Schema `archspec schema` prints.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Annotated, Any, Callable, Literal, Union

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()
CONSTRAINTS = ("gt", "ge", "lt", "le", "min_length", "max_length", "pattern", "allow_inf_nan")
_FAIL = object()  # a validator's result when it appended errors


# -- declaring ---------------------------------------------------------------------------------


class FieldInfo:
    """What a field declares: `annotation` (without its outer Annotated), `default` or
    `default_factory`, `description`, `alias`, and `metadata` (one namespace per constraint:
    `namespace(gt=0)`, read with getattr as annotated_types' objects are)."""

    __slots__ = ("annotation", "default", "default_factory", "description", "alias", "constraints", "_validate")

    def __init__(self, default: Any = MISSING, default_factory: Callable[[], Any] | None = None,
                 description: str | None = None, alias: str | None = None, constraints: dict | None = None):
        self.annotation: Any = None
        self.default = MISSING if default is Ellipsis else default
        self.default_factory = default_factory
        self.description = description
        self.alias = alias
        self.constraints = dict(constraints or {})

    @property
    def metadata(self) -> list:
        return [types.SimpleNamespace(**{name: value}) for name, value in self.constraints.items()]

    def is_required(self) -> bool:
        return self.default is MISSING and self.default_factory is None

    def get_default(self, call_default_factory: bool = False) -> Any:
        if self.default_factory is not None:
            return self.default_factory() if call_default_factory else None
        return None if self.default is MISSING else self.default

    def merged_over(self, other: FieldInfo) -> FieldInfo:
        """This field's declaration laid over `other` (an Annotated alias's): what this one says wins."""
        default, factory = (other.default, other.default_factory) if self.is_required() else \
            (self.default, self.default_factory)
        return FieldInfo(default, factory, self.description or other.description, self.alias or other.alias,
                         {**other.constraints, **self.constraints})

    def __repr__(self) -> str:
        shown = {"default": self.default, "description": self.description, "alias": self.alias, **self.constraints}
        return "Field(" + ", ".join(f"{k}={v!r}" for k, v in shown.items() if v is not None and v is not MISSING) + ")"


def Field(default: Any = MISSING, *, default_factory: Callable[[], Any] | None = None, alias: str | None = None,
          description: str | None = None, **constraints: Any) -> Any:
    """A field's default and what else it declares (pydantic's Field, for the options used here:
    gt, ge, lt, le, min_length, max_length, pattern, allow_inf_nan)."""
    unknown = set(constraints) - set(CONSTRAINTS)
    if unknown:
        raise TypeError(f"Field() got unsupported options {sorted(unknown)}; supported: {CONSTRAINTS}")
    return FieldInfo(default, default_factory, description, alias,
                     {k: v for k, v in constraints.items() if v is not None})


def _as_field(value: Any) -> FieldInfo | None:
    """A FieldInfo of ours, or one of pydantic's (a plugin written against pydantic) translated."""
    if isinstance(value, FieldInfo):
        return value
    if type(value).__name__ == "FieldInfo" and type(value).__module__.startswith("pydantic"):
        constraints = {}
        for m in getattr(value, "metadata", ()):
            constraints.update({k: getattr(m, k) for k in CONSTRAINTS if getattr(m, k, None) is not None})
        default = getattr(value, "default", MISSING)
        default = MISSING if type(default).__name__ == "PydanticUndefinedType" else default
        return FieldInfo(default, value.default_factory, value.description, value.alias, constraints)
    return None


def field_validator(name: str, mode: str = "after") -> Callable:
    """pydantic's field_validator for one field: the decorated classmethod takes the value (before
    its type is checked with mode="before") and returns it, or raises ValueError."""
    if mode not in ("after", "before"):
        raise TypeError(f"field_validator mode {mode!r}: 'after' or 'before'")

    def mark(method):
        function = method.__func__ if isinstance(method, classmethod) else method
        function.__validates__ = (name, mode)
        return method

    return mark


# -- errors ------------------------------------------------------------------------------------


class ValidationError(ValueError):
    """The errors of one validation, as pydantic's ValidationError gives them."""

    def __init__(self, title: str, errors: list[dict]):
        super().__init__(title)
        self.title = title
        self._errors = errors

    def errors(self, include_url: bool = True, include_context: bool = True, include_input: bool = True) -> list[dict]:
        out = []
        for err in self._errors:
            err = dict(err)
            if not include_context:
                err.pop("ctx", None)
            if not include_input:
                err.pop("input", None)
            out.append(err)
        return out

    def error_count(self) -> int:
        return len(self._errors)

    def __str__(self) -> str:
        n = len(self._errors)
        lines = [f"{n} validation error{'s' if n != 1 else ''} for {self.title}"]
        for err in self._errors:
            lines.append(".".join(str(p) for p in err["loc"]) or "(root)")
            lines.append(f"  {err['msg']} [type={err['type']}, input_value={err.get('input')!r}, "
                         f"input_type={type(err.get('input')).__name__}]")
        return "\n".join(lines)


def _fail(errors: list, kind: str, loc: tuple, msg: str, value: Any, ctx: dict | None = None) -> Any:
    err = {"type": kind, "loc": loc, "msg": msg, "input": value}
    if ctx is not None:
        err["ctx"] = ctx
    errors.append(err)
    return _FAIL


def _number(value: Any) -> str:
    """A bound as pydantic-core writes it: 0.00001, not 1e-05; 2, not 2.0."""
    if isinstance(value, float):
        import decimal  # only on the error path

        text = format(decimal.Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# -- validators: (value, loc, errors) -> value or _FAIL ---------------------------------------------

Validator = Callable[[Any, tuple, list], Any]
_BOUNDS = (  # checked in pydantic-core's order; NaN fails the first bound given
    ("le", lambda v, b: v <= b, "less_than_equal", "less than or equal to"),
    ("lt", lambda v, b: v < b, "less_than", "less than"),
    ("ge", lambda v, b: v >= b, "greater_than_equal", "greater than or equal to"),
    ("gt", lambda v, b: v > b, "greater_than", "greater than"),
)


def _bounded(kind: type, c: dict) -> Validator:
    bounds = [(name, (float(c[name]) if kind is float else c[name]), test, code, words)
              for name, test, code, words in _BOUNDS if name in c]
    finite = kind is float and c.get("allow_inf_nan") is False
    kind_error = ("int_type", "Input should be a valid integer") if kind is int else \
        ("float_type", "Input should be a valid number")

    def validate(value, loc, errors):
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            return _fail(errors, kind_error[0], loc, kind_error[1], value)
        number = float(value) if kind is float else value
        if finite and (number != number or number in (float("inf"), float("-inf"))):
            return _fail(errors, "finite_number", loc, "Input should be a finite number", value)
        for name, bound, test, code, words in bounds:
            if not test(number, bound):
                return _fail(errors, code, loc, f"Input should be {words} {_number(bound)}", value, {name: bound})
        return number

    return validate


def _string(c: dict) -> Validator:
    shortest, longest, pattern = c.get("min_length"), c.get("max_length"), c.get("pattern")
    compiled = None
    if pattern is not None:
        import re

        compiled = re.compile(pattern)

    def validate(value, loc, errors):
        if not isinstance(value, str):
            return _fail(errors, "string_type", loc, "Input should be a valid string", value)
        if shortest is not None and len(value) < shortest:
            return _fail(errors, "string_too_short", loc,
                         f"String should have at least {_plural(shortest, 'character')}", value,
                         {"min_length": shortest})
        if longest is not None and len(value) > longest:
            return _fail(errors, "string_too_long", loc,
                         f"String should have at most {_plural(longest, 'character')}", value, {"max_length": longest})
        if compiled is not None and not compiled.search(value):
            return _fail(errors, "string_pattern_mismatch", loc, f"String should match pattern '{pattern}'", value,
                         {"pattern": pattern})
        return value

    return validate


def _bool(value, loc, errors):
    if not isinstance(value, bool):
        return _fail(errors, "bool_type", loc, "Input should be a valid boolean", value)
    return value


def _any(value, loc, errors):
    return value


def _none(value, loc, errors):
    if value is not None:
        return _fail(errors, "none_required", loc, "Input should be None", value)
    return None


def _literal_text(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _literal(expected: tuple) -> tuple[Validator, str]:
    texts = [_literal_text(e) for e in expected]
    wanted = texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " or " + texts[-1]
    strings = {e for e in expected if isinstance(e, str)}
    others = [e for e in expected if not isinstance(e, str)]  # pydantic matches 1 with True and 1.0 alike

    def validate(value, loc, errors):
        if isinstance(value, str):
            if value in strings:
                return value
        else:
            for e in others:
                try:
                    if value == e and (e is None) == (value is None):
                        return e
                except Exception:  # noqa: BLE001 - a value that cannot be compared is no match
                    pass
        return _fail(errors, "literal_error", loc, f"Input should be {wanted}", value, {"expected": wanted})

    return validate, "literal[" + ",".join(texts) + "]"


def _sized(kind: str, length: int, c: dict, loc: tuple, errors: list, value: Any, check_long: bool) -> bool:
    """A too_short / too_long error for a list or dict (pydantic's texts); True when it failed."""
    label = "item"
    longest, shortest = c.get("max_length"), c.get("min_length")
    if check_long and longest is not None and length > longest:
        _fail(errors, "too_long", loc, f"{kind} should have at most {_plural(longest, label)} after validation, not "
                                       f"{length}", value,
              {"field_type": kind, "max_length": longest, "actual_length": length})
        return True
    if not check_long and shortest is not None and length < shortest:
        _fail(errors, "too_short", loc, f"{kind} should have at least {_plural(shortest, label)} after validation, not "
                                        f"{length}", value,
              {"field_type": kind, "min_length": shortest, "actual_length": length})
        return True
    return False


def _list(item: Validator, c: dict) -> Validator:
    def validate(value, loc, errors):
        if not isinstance(value, list):
            return _fail(errors, "list_type", loc, "Input should be a valid list", value)
        if _sized("List", len(value), c, loc, errors, value, check_long=True):
            return _FAIL
        before, out = len(errors), []
        for i, entry in enumerate(value):
            out.append(item(entry, loc + (i,), errors))
        if len(errors) > before or _sized("List", len(out), c, loc, errors, value, check_long=False):
            return _FAIL
        return out

    return validate


def _dict(key: Validator, item: Validator, c: dict) -> Validator:
    def validate(value, loc, errors):
        if not isinstance(value, dict):
            return _fail(errors, "dict_type", loc, "Input should be a valid dictionary", value)
        if _sized("Dictionary", len(value), c, loc, errors, value, check_long=True):
            return _FAIL
        before, out = len(errors), {}
        for k, v in value.items():
            k2 = key(k, loc + (k, "[key]"), errors)
            v2 = item(v, loc + (k,), errors)
            if k2 is not _FAIL:
                out[k2] = v2
        if len(errors) > before or _sized("Dictionary", len(out), c, loc, errors, value, check_long=False):
            return _FAIL
        return out

    return validate


def _union(members: list[tuple[Validator, str]]) -> Validator:
    """pydantic's smart union over strict members: the first member that takes the value as it is
    (an int for an int, not for a float); failing all, every member's errors under its label."""

    def validate(value, loc, errors):
        tried, fallback = [], _FAIL
        for check, label in members:
            errs: list = []
            out = check(value, loc + (label,), errs)
            if out is _FAIL:
                tried += errs
                continue
            if type(out) is type(value) or isinstance(value, Model) or isinstance(value, (list, dict)):
                return out
            if fallback is _FAIL:
                fallback = out
        if fallback is not _FAIL:
            return fallback
        errors += tried
        return _FAIL

    return validate


def _nullable(inner: Validator) -> Validator:
    def validate(value, loc, errors):
        return None if value is None else inner(value, loc, errors)

    return validate


def _split(annotation: Any) -> tuple[Any, dict]:
    """(the type, its constraints) of a possibly Annotated annotation."""
    if typing.get_origin(annotation) is not Annotated:
        return annotation, {}
    base, *extras = typing.get_args(annotation)
    constraints: dict = {}
    for extra in extras:
        field = _as_field(extra)
        if field is not None:
            constraints.update(field.constraints)
    return base, constraints


def _label(c: dict, name: str) -> str:
    return f"constrained-{name}" if c else name


def compile_annotation(annotation: Any, constraints: dict | None = None) -> tuple[Validator, str]:
    """The validator of one annotation and pydantic-core's label for it (the loc part a union
    member's errors carry: 'int', 'constrained-int', 'list[int]', "literal['a','b']", a model's
    name)."""
    base, c = _split(annotation)
    c = {**c, **(constraints or {})}
    origin, args = typing.get_origin(base), typing.get_args(base)
    if base is int or base is float:
        name = base.__name__
        bounds = {k: v for k, v in c.items() if k in ("gt", "ge", "lt", "le", "allow_inf_nan")}
        return _bounded(base, bounds), _label({k: v for k, v in bounds.items() if k != "allow_inf_nan"}, name)
    if base is str:
        return _string(c), _label(c, "str")
    if base is bool:
        return _bool, "bool"
    if base is Any:
        return _any, "any"
    if base is None or base is type(None):
        return _none, "none"
    if origin is Literal:
        return _literal(args)
    if origin is list:
        item, label = compile_annotation(args[0] if args else Any)
        return _list(item, c), f"list[{label}]"
    if origin is dict:
        (key, key_label), (item, item_label) = (compile_annotation(a) for a in (args or (Any, Any)))
        return _dict(key, item, c), f"dict[{key_label},{item_label}]"
    if origin is Union or origin is types.UnionType:
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            inner, label = compile_annotation(rest[0], c)
        else:
            if c:
                raise TypeError(f"constraints {c} on a union {annotation!r}: put them on its members")
            members = [compile_annotation(a) for a in rest]
            inner, label = _union(members), "union[" + ",".join(lab for _, lab in members) + "]"
        return (_nullable(inner), f"nullable[{label}]") if optional else (inner, label)
    if isinstance(base, type) and issubclass(base, Model):
        return base._validate_at, base.__name__
    raise TypeError(f"unsupported annotation {annotation!r} (archspec.core.declared)")


# -- the model ---------------------------------------------------------------------------------


class _Declared:
    """A model's fields and validators, built on first use."""

    def __init__(self, cls: type[Model]):
        hints = typing.get_type_hints(cls, include_extras=True)
        self.fields: dict[str, FieldInfo] = {}
        for klass in reversed(cls.__mro__):
            own = klass.__dict__.get("__annotations__", {})
            for name in own:
                if name.startswith("_") or name not in hints or typing.get_origin(hints[name]) is typing.ClassVar:
                    continue
                self.fields[name] = _field(hints[name], klass.__dict__.get(name, MISSING))
        config = getattr(cls, "model_config", {}) or {}
        self.by_name = bool(config.get("populate_by_name"))
        self.validators: dict[tuple[str, str], list[Callable]] = {}
        for klass in reversed(cls.__mro__):
            for attr in klass.__dict__.values():
                function = attr.__func__ if isinstance(attr, (classmethod, staticmethod)) else attr
                mark = getattr(function, "__validates__", None)
                if mark is not None:
                    self.validators.setdefault(mark, []).append(getattr(cls, function.__name__))
        for name, field in self.fields.items():
            field._validate = compile_annotation(field.annotation, field.constraints)[0]
        self.keys = {f.alias or n: n for n, f in self.fields.items()}
        if self.by_name:
            self.keys.update({n: n for n in self.fields})


def _field(hint: Any, value: Any) -> FieldInfo:
    """One field from its resolved annotation and its class attribute."""
    base, extras = hint, ()
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
    declared = _as_field(value)
    field = declared if declared is not None else FieldInfo(value)
    for extra in extras:
        from_alias = _as_field(extra)
        if from_alias is not None:
            field = field.merged_over(from_alias)
    field = FieldInfo(field.default, field.default_factory, field.description, field.alias, field.constraints)
    field.annotation = base  # as pydantic gives it: the outer Annotated's constraints are the field's
    return field


class _ModelFields:
    def __get__(self, obj, cls) -> dict[str, FieldInfo]:
        return cls._declared().fields


class Model:
    """A frozen record of declared, validated fields (see the module's doc)."""

    __slots__ = ("__dict__", "model_fields_set")
    model_config = {}  # populate_by_name: a field with an alias is also found by its name
    model_fields = _ModelFields()

    def __init__(self, **data: Any):
        made = type(self).model_validate(data)
        object.__setattr__(self, "__dict__", made.__dict__)
        object.__setattr__(self, "model_fields_set", made.model_fields_set)

    @classmethod
    def _declared(cls) -> _Declared:
        declared = cls.__dict__.get("__declared__")
        if declared is None:
            declared = _Declared(cls)
            type.__setattr__(cls, "__declared__", declared)
        return declared

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        errors: list = []
        out = cls._validate_at(data, (), errors)
        if errors:
            raise ValidationError(cls.__name__, errors)
        return out

    @classmethod
    def _validate_at(cls, data: Any, loc: tuple, errors: list) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            return _fail(errors, "model_type", loc, f"Input should be a valid dictionary or instance of {cls.__name__}",
                         data, {"class_name": cls.__name__})
        declared, before = cls._declared(), len(errors)
        values, given = {}, set()
        for name, field in declared.fields.items():
            key = field.alias or name
            if key not in data and declared.by_name and name in data:
                key = name
            if key not in data:
                if field.is_required():
                    _fail(errors, "missing", loc + (field.alias or name,), "Field required", data)
                else:
                    values[name] = field.default_factory() if field.default_factory else copy.copy(field.default)
                continue
            given.add(name)
            values[name] = _field_value(cls, declared, name, field, data[key], loc + (key,), errors)
        for key, value in data.items():
            if key not in declared.keys:
                _fail(errors, "extra_forbidden", loc + (key,), "Extra inputs are not permitted", value)
        if len(errors) > before:
            return _FAIL
        made = object.__new__(cls)
        object.__setattr__(made, "__dict__", values)
        object.__setattr__(made, "model_fields_set", given)
        return made

    @classmethod
    def model_json_schema(cls, **options: Any) -> dict[str, Any]:
        """pydantic's JSON Schema of this model (imports pydantic)."""
        return pydantic_model(cls).model_json_schema(**options)

    def model_dump(self, by_alias: bool = False, **_: Any) -> dict[str, Any]:
        fields = type(self).model_fields
        return {(fields[k].alias or k) if by_alias else k: _dumped(v, by_alias) for k, v in self.__dict__.items()}

    def model_copy(self, update: dict | None = None, deep: bool = False) -> Any:
        made = object.__new__(type(self))
        values = copy.deepcopy(self.__dict__) if deep else dict(self.__dict__)
        values.update(update or {})
        object.__setattr__(made, "__dict__", values)
        object.__setattr__(made, "model_fields_set", set(self.model_fields_set) | set(update or {}))
        return made

    def __setattr__(self, name: str, value: Any) -> None:
        raise ValidationError(type(self).__name__, [{"type": "frozen_instance", "loc": (name,),
                                                     "msg": "Instance is frozen", "input": value}])

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __getstate__(self) -> dict:
        return {"values": self.__dict__, "given": self.model_fields_set}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "__dict__", state["values"])
        object.__setattr__(self, "model_fields_set", state["given"])

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self),) + tuple(self.__dict__.values()))

    def __iter__(self):
        yield from self.__dict__.items()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items()) + ")"


def create_model(name: str, __base__: type[Model] = Model, **fields: tuple[Any, Any]) -> type[Model]:
    """A Model subclass named `name` with fields given as name=(annotation, default or Field)."""
    namespace = {"__annotations__": {k: annotation for k, (annotation, _) in fields.items()},
                 "__module__": __base__.__module__, **{k: value for k, (_, value) in fields.items()}}
    return type(name, (__base__,), namespace)


def _field_value(cls, declared: _Declared, name: str, field: FieldInfo, value: Any, loc: tuple, errors: list) -> Any:
    for check in declared.validators.get((name, "before"), ()):
        try:
            value = check(value)
        except ValueError as exc:
            return _fail(errors, "value_error", loc, f"Value error, {exc}", value, {"error": exc})
    before = len(errors)
    value = field._validate(value, loc, errors)
    if len(errors) > before:
        return _FAIL
    for check in declared.validators.get((name, "after"), ()):
        try:
            value = check(value)
        except ValueError as exc:
            return _fail(errors, "value_error", loc, f"Value error, {exc}", value, {"error": exc})
    return value


def _dumped(value: Any, by_alias: bool) -> Any:
    if isinstance(value, Model):
        return value.model_dump(by_alias=by_alias)
    if isinstance(value, list):
        return [_dumped(v, by_alias) for v in value]
    if isinstance(value, dict):
        return {k: _dumped(v, by_alias) for k, v in value.items()}
    return value


# -- the same model in pydantic, for JSON Schema ----------------------------------------------------------


_PYDANTIC: dict[type, Any] = {}


def pydantic_model(cls: type[Model]) -> Any:
    """The pydantic model equivalent to `cls` (fields, defaults, constraints, descriptions,
    aliases, config, validators), built once. It imports pydantic: only what needs pydantic's
    JSON Schema (`archspec schema`, the language server) and the tests that compare the two call it."""
    if cls in _PYDANTIC:
        return _PYDANTIC[cls]
    import pydantic

    config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True,
                                 populate_by_name=bool((cls.model_config or {}).get("populate_by_name")))
    fields = {name: (_pydantic_annotation(f.annotation), _pydantic_field(f)) for name, f in cls.model_fields.items()}
    validators = {}
    for (name, mode), checks in cls._declared().validators.items():
        for i, check in enumerate(checks):
            validators[f"_{name}_{mode}_{i}"] = pydantic.field_validator(name, mode=mode)(
                classmethod(lambda _cls, value, _check=check: _check(value)))
    model = pydantic.create_model(cls.__name__, __config__=config, __doc__=cls.__doc__, __module__=cls.__module__,
                                  __validators__=validators, **fields)
    model.__qualname__ = cls.__qualname__
    _PYDANTIC[cls] = model
    return model


def _pydantic_field(field: FieldInfo) -> Any:
    import pydantic

    kwargs = {k: v for k, v in (("description", field.description), ("alias", field.alias)) if v is not None}
    if field.default_factory is not None:
        kwargs["default_factory"] = field.default_factory
    elif field.default is not MISSING:
        kwargs["default"] = field.default
    return pydantic.Field(**kwargs, **field.constraints)


def _pydantic_annotation(annotation: Any) -> Any:
    """`annotation` with our Models and Fields swapped for pydantic's."""
    import pydantic

    if isinstance(annotation, type) and issubclass(annotation, Model):
        return pydantic_model(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        extras = [pydantic.Field(**_as_field(e).constraints) if _as_field(e) is not None else e for e in args[1:]]
        return Annotated[(_pydantic_annotation(args[0]), *extras)]
    if origin in (list, dict):
        return origin[tuple(_pydantic_annotation(a) for a in args)] if args else annotation
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_pydantic_annotation(a) for a in args)]
    return annotation

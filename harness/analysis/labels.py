"""A run's identity and its names: the config keys that tell runs apart (never a hand-picked list
of columns), and the labels of nets and settings built from them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from harness.analysis.memo import remembered
from harness.config import identity
from harness.config.identity import CHOICE_COLUMNS, ID_COLUMNS
from harness.results import config_keys

# Short columns that name a config (kept beside the dotted config-key columns).
LABEL_COLUMNS = [c for c in ID_COLUMNS if c != "seed"]


# The choices that name a net (the model) and a setting (the optimizer). Any other choice (the
# schedule) is told by its name only where a label states it: a label key where it varies.
NAME_COLUMNS = ("model", "optimizer")


# The config keys of the short columns (harness.config.identity), by their short column.
LR_KEY, MOMENTUM_KEY, BATCH_KEY, HIDDEN_KEY = (
    identity.SHORT_COLUMNS[c] for c in ("lr", "momentum", "batch_size", "hidden")
)


# The keys that make a net (a panel of the figures): its shape.
NET_KEYS = (HIDDEN_KEY,)


# Short column of a config key, where there is one: also its name in labels.
SHORT_COLUMNS = {key: column for column, key in identity.SHORT_COLUMNS.items()}


def _matches(key: str, names: Iterable[str]) -> bool:
    """Whether dotted `key` is one of `names` (a name ending in '.' stands for a whole group)."""
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in names)


def _text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The texts of a column's values, as a label writes them, as codes into its distinct texts
    (equal codes, equal texts). NaN (a key some runs lack) is written 'nan': a value of its own,
    never a dropped group. Each distinct value is written once (a zoo's report reads 215 keys
    of 1,206 runs in dozens of tables). A column of one type (numbers, text, categories) is
    told apart by its values; an object column by their type and text (1, 1.0 and True are
    equal to pandas but written apart)."""
    if len(column) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=object)
    if column.dtype != object:
        codes, uniques = pd.factorize(column, use_na_sentinel=False)
    else:  # told apart by type and value; written from each distinct value's first row
        values = column.to_numpy()
        codes = _typed_codes(values)
        first = np.empty(codes.max() + 1, dtype=np.int64)
        first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
        uniques = values[first]
    # Distinct values may share a text (floats equal to 6 digits): codes of the texts.
    text_codes, texts = pd.factorize(
        np.array([_value_text(v) for v in uniques], dtype=object), use_na_sentinel=False
    )
    return text_codes[codes], np.asarray(texts, dtype=object)


_type_of = np.frompyfunc(type, 1, 1)


def _typed_codes(values: np.ndarray) -> np.ndarray:
    """Codes of an object array's values, equal for values of one type that compare equal (1,
    1.0 and True apart; None and NaN apart); lists, which cannot be hashed, by their repr."""
    types, _ = pd.factorize(_type_of(values))
    try:
        same, _ = pd.factorize(values, use_na_sentinel=False)
    except TypeError:  # a list among the values
        same, _ = pd.factorize(np.array([repr(v) for v in values]), use_na_sentinel=False)
    return pd.factorize(same * (types.max() + 1) + types)[0]


def _value_text(value) -> str:
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:g}"
    return str(value)


@remembered
def config_key(frame: pd.DataFrame, without: Sequence[str] = ()) -> pd.Series:
    """One text key per row: its config with the keys `without` left out (dotted names; 'x.'
    leaves out the group x). Rows with equal keys differ only in those keys (and the seed)."""
    keys = [k for k in config_keys(frame) if not _matches(k, without)]
    return _joined_texts(frame, keys, lambda key: f"{key}=", "|")


def _joined_texts(
    frame: pd.DataFrame, keys: Sequence[str], name: Callable[[str], str], separator: str
) -> pd.Series:
    """Per row, `name(key)` and the text of its value for each key, joined by `separator`.
    Each distinct row of texts is joined once (a zoo's 215 keys: joining them row by row
    copied every growing text 215 times)."""
    if not keys:
        return pd.Series("", index=frame.index, dtype=object)
    parts, codes = [], np.empty((len(frame), len(keys)), dtype=np.int64)
    for j, key in enumerate(keys):
        codes[:, j], texts = _text_codes(frame[key])
        parts.append(name(key) + texts)
    rows, row_of = _distinct_rows(codes)
    joined = np.array(
        [separator.join(part[c] for part, c in zip(parts, row, strict=True)) for row in rows],
        dtype=object,
    )
    return pd.Series(joined[row_of], index=frame.index, dtype=object)


def _distinct_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a code matrix and, per row, the index of its distinct row."""
    rows, row_of = np.unique(codes, axis=0, return_inverse=True)
    return rows, row_of.reshape(-1)


def config_groups(frame: pd.DataFrame, without: Sequence[str] = ()) -> np.ndarray:
    """Per row, a group number: rows share one exactly when their `config_key`s are equal (the
    texts are not written: grouping a zoo's configs by 215 keys needs only their codes)."""
    keys = [k for k in config_keys(frame) if not _matches(k, without)]
    if not keys or frame.empty:
        return np.zeros(len(frame), dtype=np.int64)
    return _distinct_rows(np.column_stack([_codes(frame[k]) for k in keys]))[1]


@remembered
def label_keys(frame: pd.DataFrame, without: Sequence[str] = ()) -> list[str]:
    """The config keys that tell the rows of `frame` apart beyond their choice names (see
    `varying_keys`), and the choices that name neither net nor setting (the schedule) where
    they vary, less those whose value follows from the others."""
    found = varying_keys(frame, without)
    # After the config keys: of a key and a choice that move in lockstep, the choice stays.
    found += [
        c
        for c in CHOICE_COLUMNS
        if c not in NAME_COLUMNS
        and c in frame
        and not _matches(c, without)
        and not _matches(f"{c}.", without)  # 'schedule.' leaves out the choice with its keys
        and len(_text_codes(frame[c])[1]) > 1
    ]
    # What else sets a key's value: the choice names, the net, and the keys left out here (the
    # axis a figure runs along), but not the learning rate, which follows from the others.
    given = [
        c
        for c in frame.columns
        if c in (*CHOICE_COLUMNS, *NET_KEYS) or (c != LR_KEY and "." in c and _matches(c, without))
    ]
    return _without_derived(frame, found, given)


@remembered
def varying_keys(frame: pd.DataFrame, without: Sequence[str] = ()) -> list[str]:
    """The config keys (not `without`) that differ between rows of one model / optimizer /
    schedule option (or between any rows, for keys outside those groups)."""
    keys = [k for k in config_keys(frame) if not _matches(k, without)]
    options = {}  # the options of a group, written once for all its keys
    for group in {k.split(".", 1)[0] for k in keys}:
        if group in CHOICE_COLUMNS and group in frame:
            options[group] = _codes(frame[group])
    same = _same_within(frame, keys, options)
    found = []
    for key in keys:
        if key in same:
            continue
        codes, texts = _text_codes(frame[key])
        if len(texts) <= 1:  # the same in every row: it tells none apart
            continue
        option = options.get(key.split(".", 1)[0])
        # Some option holds two values of the key: more (option, value) pairs than options.
        if option is None or len(np.unique(option * len(texts) + codes)) > option.max() + 1:
            found.append(key)
    return found


def _same_within(frame: pd.DataFrame, keys: Sequence[str], options: dict) -> set[str]:
    """The numeric keys whose value is the same (NaN with NaN) in every row of each option of
    their group (of the whole frame, for keys outside the groups): equal values write equal
    texts, so these cannot vary; a zoo's 146 numeric keys are checked at once, per group."""
    same = set()
    whole = np.zeros(len(frame), dtype=np.int64)  # keys outside the groups: one option
    numeric = [k for k in keys if frame[k].dtype.kind in "fiub"]
    for option in [*options.values(), whole]:
        of_option = [k for k in numeric if options.get(k.split(".", 1)[0], whole) is option]
        if not of_option or len(frame) < 2:
            same.update(of_option)
            continue
        order = np.argsort(option, kind="stable")
        values = frame[of_option].to_numpy(dtype=float, na_value=np.nan)[order]
        after, before = values[1:], values[:-1]
        # equal, and written alike: -0.0 is written '-0'
        equal = ((after == before) & (np.signbit(after) == np.signbit(before))) | (
            np.isnan(after) & np.isnan(before)
        )
        neighbours = (option[order][1:] == option[order][:-1])[:, None]  # rows of one option
        differs = (~equal & neighbours).any(axis=0)
        same.update(k for k, d in zip(of_option, differs, strict=True) if not d)
    return same


def _codes(column: pd.Series) -> np.ndarray:
    return _text_codes(column)[0]


def _without_derived(frame: pd.DataFrame, keys: list[str], given: Sequence[str]) -> list[str]:
    """`keys` less those whose value follows from the others and the `given` columns: a rate
    looked up for a table optimizer, the epochs a budget implies, an evaluation interval looked
    up per batch size. They are attributes of the keys that set them, not settings or axes of
    their own. Numeric keys go first, so that of two keys that move in lockstep the named
    choice stays."""
    given = [c for c in given if c not in keys]
    codes = pd.DataFrame({k: _codes(frame[k]) for k in (*given, *keys)}, index=frame.index)
    kept = list(keys)
    for key in sorted(keys, key=lambda k: not is_numeric_key(frame, k)):
        others = [*given, *(k for k in kept if k != key)]
        if not others:
            break
        text = codes[[*others, key]].drop_duplicates()
        if not text.duplicated(subset=others).any():  # one value of `key` per combination
            kept.remove(key)
    return kept


def _describe(frame: pd.DataFrame, keys: Sequence[str], strip: str) -> pd.Series:
    """'key=value, key=value' per row, `strip` removed from the front of key names."""
    return _joined_texts(
        frame, keys, lambda key: f"{SHORT_COLUMNS.get(key, key.removeprefix(strip))}=", ", "
    )


def _joined(name: pd.Series, details: pd.Series, separator: str) -> pd.Series:
    return name.where(details == "", name + separator + details)


def joined_labels(name: pd.Series, frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """`name` with the values of `keys` in `frame`: 'net2, momentum=0.9'."""
    return _joined(name.astype(str), _describe(frame, keys, "optimizer."), ", ")


@remembered
def net_labels(frame: pd.DataFrame) -> pd.Series:
    """A net's name: the model, with its hidden layers when they differ between runs of that
    model ('mlp: hidden=[100, 100]'). Other model keys (activations, initialisation) are part
    of the setting: curves of one shape of net are compared in one panel."""
    keys = [k for k in label_keys(frame) if k in NET_KEYS]
    return _joined(frame["model"].astype(str), _describe(frame, keys, "model."), ": ")


@remembered
def setting_labels(frame: pd.DataFrame, without: Sequence[str] = (LR_KEY,)) -> pd.Series:
    """A setting's name: the optimizer with every other key that tells configs apart (not the
    net's keys, nor `without`): 'adam: weight_decay=0.1, model.activations=[relu]'."""
    keys = label_keys(frame, without=(*NET_KEYS, *without))
    optimizer_keys = [k for k in keys if k.startswith("optimizer.")]
    other = [k for k in keys if not k.startswith("optimizer.")]
    details = _describe(frame, [*optimizer_keys, *other], "optimizer.")
    return _joined(frame["optimizer"].astype(str), details, ": ")


@remembered
def with_net(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `net` and `setting` columns (see net_labels, setting_labels)."""
    if not len(frame):
        return frame.assign(net=[], setting=[])
    return frame.assign(net=net_labels(frame), setting=setting_labels(frame))


def fixed_settings(frame: pd.DataFrame) -> dict[str, object]:
    """The short settings that every row of `frame` shares (schedule, batch size, iterations,
    ...): what titles and headers state once instead of repeating it per line."""
    fixed = {}
    for column in ("schedule", "batch_size", "iterations", "momentum"):
        if column in frame and frame[column].nunique(dropna=False) == 1:
            value = frame[column].iloc[0]
            if not (isinstance(value, float) and math.isnan(value)):
                fixed[column] = value
    return fixed


def is_numeric_key(frame: pd.DataFrame, key: str) -> bool:
    """Whether config key `key` takes numbers (not flags) in `frame`: an axis, not a name."""
    dtype = frame[key].dropna().infer_objects().dtype
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def key_values(frame: pd.DataFrame, key: str) -> pd.Series:
    """The values of config key `key` in `frame` (its dotted column, or its short column when the
    key is the same for every loaded run)."""
    return frame[key] if key in frame else frame[SHORT_COLUMNS[key]]

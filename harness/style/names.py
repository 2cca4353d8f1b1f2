"""Display names of optimizers: what legends, tables and READMEs call each catalogued optimizer.

A catalogue name (`schedulefreeradam`, `schedulefree_radam`, `pto_adamax`) is a config's key,
not a name a reader can map to a paper or a library: two of them differ by an underscore. A
display name is the class and the library it comes from: "Schedule-Free RAdam
(pytorch-optimizer)" and "Schedule-Free RAdam (schedulefree)". The course's optimizers (the
curated files of conf/optimizer/, all torch.optim's but YellowFin) keep the names of the course.
"""

from __future__ import annotations

import re

# The curated optimizers: torch.optim's classes under the names the course gives them.
DISPLAY_NAMES = {
    "sgd": "SGD",
    "momentum": "Momentum",
    "nesterov": "Nesterov",
    "adagrad": "Adagrad",
    "adadelta": "Adadelta",
    "rmsprop": "RMSprop",
    "adam": "Adam",
    "adamax": "Adamax",
    "nadam": "NAdam",
    "adamw": "AdamW",
    "radam": "RAdam",
    "yellowfin": "YellowFin",
}

# The package a class's module starts with, as its users write it.
LIBRARY_NAMES = {
    "torch": "torch",
    "schedulefree": "schedulefree",
    "pytorch_optimizer": "pytorch-optimizer",
    "harness": "harness",
}

_SCHEDULE_FREE = "ScheduleFree"


def class_text(class_name: str) -> str:
    """A class name as a reader knows it: 'ScheduleFreeRAdam' and 'RAdamScheduleFree' both as
    'Schedule-Free RAdam' (schedulefree's variants keep their suffix: 'Schedule-Free AdamW
    Paper'); any other class name as it is."""
    if _SCHEDULE_FREE not in class_name:
        return class_name
    rest = class_name.replace(_SCHEDULE_FREE, " ").split()
    # 'AdamWScheduleFreeClosure' -> ['AdamW', 'Closure']: the optimizer, then its variant
    return " ".join(["Schedule-Free", *rest])


def display_name(optimizer: str, target: str | None = None) -> str:
    """The display name of catalogue name `optimizer`, whose class is the dotted `target`
    (its config's `_target_`; None: unknown): the course's name for a curated optimizer, else
    'Class (library)'; the catalogue name itself where no class is known."""
    if optimizer in DISPLAY_NAMES:
        return DISPLAY_NAMES[optimizer]
    if not target or "." not in str(target):
        return optimizer
    module, class_name = str(target).rsplit(".", 1)
    package = module.split(".", 1)[0]
    library = LIBRARY_NAMES.get(package, package)
    return f"{class_text(class_name)} ({library})"


def display_setting(setting: str, optimizer: str, names: dict[str, str]) -> str:
    """A setting's label ('adam: weight_decay=0.1') with its optimizer's display name in
    front ('Adam: weight_decay=0.1'); `names`: display names by catalogue name."""
    name = names.get(optimizer)
    text = str(setting)
    if name is None or not re.match(re.escape(str(optimizer)) + r"(:|$)", text):
        return text
    return name + text[len(str(optimizer)) :]

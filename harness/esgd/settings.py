"""ESGD's settings (the `esgd` node of `experiment=esgd`), checked into one frozen dataclass."""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from harness.config.validate import require_choice, require_int, require_number
from harness.errors import ConfigError
from harness.problems import problem_of


@dataclass(frozen=True)
class Settings:
    population: int  # mu
    offspring: int  # lambda, made at every evolution step
    elite: int  # m: the fittest kept by every selection
    generations: int  # K
    sgd_steps: int  # K_s: steps of each individual in one SGD phase
    backoff_every: int  # steps between two fitness checks of the SGD phase (divides K_s)
    evolution_steps: int  # K_v
    parents: int  # rho: parents averaged into one offspring
    mutation_std: float  # sigma of the Gaussian added to every offspring weight
    recombination: str  # mean (of the parents' weights), aligned_mean (hidden units matched)
    top_k: int  # the best k individuals whose range Table 1 shows
    population_init: str  # independent (a draw each), shared (one draw), jitter (one + noise)
    population_init_std: float  # jitter: std of the Gaussian added to each individual's weights
    offspring_sgd_steps: int  # W: SGD steps of every offspring before it is evaluated
    plans: str  # redraw (per individual and generation), inherit (kept; a child: its parent's)
    anneal: float  # every plan's rate falls by this factor from the first generation to the last
    repeats: int  # seeds seed, seed + 1, ...: every method runs once per seed
    methods: tuple[str, ...]
    pool: DictConfig  # name -> {optimizer: partial config, ranges: {hyper-parameter: [lo, hi]}}
    schedules: DictConfig  # name -> partial LR scheduler config

    @property
    def steps(self) -> int:
        """Mini-batch steps per individual over the whole run."""
        return self.generations * self.sgd_steps

    def rate_scale(self, generation: int) -> float:
        """What plans' rates are multiplied by in `generation` (1 to K): anneal^((k-1)/(K-1)),
        1 in the first generation and `anneal` in the last (exactly 1 when annealing is off)."""
        return self.anneal ** ((generation - 1) / max(self.generations - 1, 1))


METHODS = ("single", "population", "esgd_no_evolution", "esgd")
INITS = ("independent", "shared", "jitter")
RECOMBINATIONS = ("mean", "aligned_mean")
PLANS = ("redraw", "inherit")


def _positive(node: DictConfig, key: str, minimum: int = 1) -> int:
    require_int(node.get(key), f"esgd.{key}", minimum=minimum)
    return int(node[key])


def _ranges(name: str, entry: DictConfig) -> None:
    if not isinstance(entry, DictConfig) or "optimizer" not in entry:
        raise ConfigError(f"esgd.pool.{name} needs an `optimizer` (a partial optimizer config)")
    for key, bounds in (entry.get("ranges") or {}).items():
        where = f"esgd.pool.{name}.ranges.{key}"
        if OmegaConf.is_list(bounds) and len(bounds) == 2:
            low, high = (require_number(b, where) for b in bounds)
            if 0 < low <= high:
                continue
        raise ConfigError(f"{where} must be [low, high] with 0 < low <= high, got {bounds}")


def _anneal(node: DictConfig) -> float:
    """The annealing factor: > 0 and finite; other than 1, every pool entry draws its rate."""
    anneal = require_number(node.get("anneal"), "esgd.anneal")
    if not (anneal > 0 and math.isfinite(anneal)):
        raise ConfigError(f"esgd.anneal must be a number > 0 (1.0: off), got {node.anneal}")
    fixed = [name for name, entry in node.pool.items() if "lr" not in (entry.get("ranges") or {})]
    if anneal != 1 and fixed:
        raise ConfigError(
            f"esgd.anneal scales the drawn rates: esgd.pool.{fixed[0]} needs ranges.lr"
        )
    return anneal


def _population_init(node: DictConfig) -> tuple[str, float]:
    init = node.get("population_init")
    require_choice(init, "esgd.population_init", INITS)
    std = require_number(node.get("population_init_std"), "esgd.population_init_std")
    if (init == "jitter") != (std > 0) or std < 0:
        raise ConfigError(
            "esgd.population_init_std must be > 0 with esgd.population_init=jitter and 0 "
            f"otherwise; got {std} with {init}"
        )
    return init, float(std)


def settings(cfg: DictConfig) -> Settings:
    """The checked settings of `cfg.esgd`; ConfigError (one line) on any bad value."""
    node = cfg.get("esgd")
    # The preset keeps the removed key as null, so that an old command's esgd.fitness_size=N
    # gets this line rather than Hydra's advice to append it.
    if node is not None and node.get("fitness_size", None) is not None:
        raise ConfigError(
            f"esgd.fitness_size is now data.val_size: fitness is measured on the data's "
            f"validation split (data.val_size={node.fitness_size})"
        )
    if node is None:
        raise ConfigError("no esgd settings: compose with experiment=esgd")
    val_size = cfg.data.get("val_size", 0)
    require_int(val_size, "data.val_size", minimum=0)
    if val_size == 0:
        raise ConfigError(
            "ESGD measures fitness on training examples held out of SGD: set data.val_size > 0"
        )
    if not problem_of(cfg).hand_stacked(cfg.model):  # the models the stacked MLP trains
        raise ConfigError(
            f"ESGD trains stacked MLPs (model=mlp, net1-net3), not {cfg.model.get('_target_')}"
        )
    population = _positive(node, "population", minimum=2)
    sgd_steps = _positive(node, "sgd_steps")
    backoff_every = _positive(node, "backoff_every")
    if sgd_steps % backoff_every:
        raise ConfigError(
            f"esgd.backoff_every ({backoff_every}) must divide esgd.sgd_steps ({sgd_steps})"
        )
    elite = _positive(node, "elite")
    if elite > population:
        raise ConfigError(f"esgd.elite ({elite}) must be at most esgd.population ({population})")
    parents = _positive(node, "parents")
    if parents > population:
        raise ConfigError(
            f"esgd.parents ({parents}) must be at most esgd.population ({population})"
        )
    top_k = _positive(node, "top_k")
    if top_k > population:
        raise ConfigError(f"esgd.top_k ({top_k}) must be at most esgd.population ({population})")
    if require_number(node.get("mutation_std"), "esgd.mutation_std") < 0:
        raise ConfigError(f"esgd.mutation_std must be >= 0, got {node.mutation_std}")
    require_choice(node.get("recombination"), "esgd.recombination", RECOMBINATIONS)
    require_choice(node.get("plans"), "esgd.plans", PLANS)
    init, init_std = _population_init(node)
    evolution_steps, offspring = _positive(node, "evolution_steps"), _positive(node, "offspring")
    warm = _positive(node, "offspring_sgd_steps", minimum=0)
    warm_compute = evolution_steps * offspring * warm
    if warm_compute % population or warm_compute // population >= sgd_steps:
        raise ConfigError(
            f"esgd.offspring_sgd_steps: the offspring's {warm_compute} warm steps per generation "
            f"(K_v x lambda x W) come out of the SGD phase: they must be a multiple of "
            f"esgd.population ({population}) and below population x sgd_steps"
        )
    methods = tuple(node.get("methods") or ())
    unknown = [m for m in methods if m not in METHODS]
    if not methods or unknown:
        raise ConfigError(f"esgd.methods must be a list of {', '.join(METHODS)}; got {methods}")
    if "single" in methods and "population" not in methods:
        raise ConfigError("esgd.methods: the single baseline needs the population baseline")
    if not node.get("pool"):
        raise ConfigError("esgd.pool must name at least one optimizer")
    for name, entry in node.pool.items():
        _ranges(name, entry)
    if not node.get("schedules"):
        raise ConfigError("esgd.schedules must name at least one schedule")
    anneal = _anneal(node)
    return Settings(
        population=population,
        offspring=offspring,
        elite=elite,
        generations=_positive(node, "generations"),
        sgd_steps=sgd_steps,
        backoff_every=backoff_every,
        evolution_steps=evolution_steps,
        parents=parents,
        mutation_std=float(node.mutation_std),
        recombination=node.recombination,
        top_k=top_k,
        population_init=init,
        population_init_std=init_std,
        offspring_sgd_steps=warm,
        plans=node.plans,
        anneal=anneal,
        repeats=_positive(node, "repeats"),
        methods=methods,
        pool=node.pool,
        schedules=node.schedules,
    )

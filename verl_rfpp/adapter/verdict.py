"""One verdict on a run config, for ``verl-rfpp check`` and verl's ``validate_config`` alike
(docs/contract.md sections 6.3, 6.4 and 6.5): is the run ours, would verl run our estimator (active), and
does the config keep the contract (valid), asked in that order. The rules themselves are
``verl_rfpp.validation``'s pure table; this module adds what needs verl: its registry and the
plugin's activation state (asked of verl only when ``verl_rfpp.adapter.loading.known_active`` has not
settled it: this module imports neither verl nor torch itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from omegaconf import DictConfig

from verl_rfpp import validation
from verl_rfpp.adapter.runtime_env import config_notes
from verl_rfpp.errors import ActivationError, RfppError

OK, REFUSED, UNREADABLE = 0, 1, 3  # the exit status of each verdict (verl-rfpp check --help)

# Where a verdict's warnings come from, in order: each returns the notes (plain sentences) for a
# config of one of our estimators that the rules accept: the legal but unusual settings (section
# 6.4), then a user's Ray runtime_env that touches what the plugin needs in the job (section 8.6).
NOTE_SOURCES: tuple[Callable[[DictConfig], list[str]], ...] = (validation.warnings_for, config_notes)


@dataclass(frozen=True)
class Verdict:
    """``name``: ``algorithm.adv_estimator`` as read (``None`` when it cannot be read);
    ``estimator``: ours that it selects, else ``None``; ``refusal``: why the run must not start
    (the wrapper raises it, ``check`` prints it); ``unread``: why ``adv_estimator`` cannot be read
    (verl's to report at run time, ``check``'s exit 3); ``warnings``: notes on an accepted run of ours;
    ``kl``: the KL an accepted run of ours uses (``validation.kl_in_use``)."""

    name: Any
    estimator: Optional[str]
    refusal: Optional[RfppError] = None
    unread: Optional[validation.UnreadableConfigError] = None
    warnings: tuple[str, ...] = ()
    kl: str = ""

    @property
    def status(self) -> int:
        """``OK``, ``REFUSED``, or ``UNREADABLE`` (a key the verdict reads does not resolve)."""
        if self.unread is not None or isinstance(self.refusal, validation.UnreadableConfigError):
            return UNREADABLE
        return OK if self.refusal is None else REFUSED

    def summary(self) -> str:
        """The last line of an accepted verdict; for a run of ours it names the KL in use (section 6.5)."""
        if self.estimator is None:
            return (f"{validation.ADV_ESTIMATOR.name}={self.name}: not a verl-rfpp estimator; "
                    "verl-rfpp does not touch this run.")
        return f"OK: this config runs {self.estimator} as docs/contract.md defines it; KL: {self.kl}."


def judge_config(config: Any, plugin_loaded: bool = True, known_active: bool = False) -> Verdict:
    """The verdict on ``config``. ``plugin_loaded``: whether verl loaded this plugin through its
    entry point (always so inside verl's ``validate_config``; ``check`` says, see
    ``verl_rfpp.adapter.loading``); ``known_active``: ``loading.known_active()`` holds, so verl's
    registry and the hooks need not be asked (they are ours). Anything that is not an OmegaConf
    config is not ours."""
    if not isinstance(config, DictConfig):
        return Verdict(None, None)
    try:
        name = validation.estimator_name(config)
    except validation.UnreadableConfigError as error:
        return Verdict(None, None, unread=error)
    estimator = validation.estimator_of(config)
    if estimator is None:
        return Verdict(name, None, refusal=_misspelt(name))
    problem = None if known_active else _activation_problem(estimator, config, plugin_loaded)
    if problem is not None:
        return Verdict(name, estimator, refusal=ActivationError(problem))
    try:
        found = validation.violations(config)
        if found:
            return Verdict(name, estimator, refusal=validation.ConfigViolationError(estimator, found))
        notes = tuple(note for source in NOTE_SOURCES for note in source(config))
        kl = validation.kl_in_use(config)
    except validation.UnreadableConfigError as error:
        return Verdict(name, estimator, refusal=error)
    return Verdict(name, estimator, warnings=notes, kl=kl)


def _activation_problem(estimator: str, config: Any, plugin_loaded: bool) -> Optional[str]:
    """Why verl, as loaded in this process, would not run ``estimator`` as ours (``registries``)."""
    from verl_rfpp.adapter.registries import activation_problem, not_loaded_problem

    return activation_problem(estimator, config) if plugin_loaded else not_loaded_problem(estimator)


def _misspelt(name: Any) -> Optional[validation.MisspeltEstimatorError]:
    """The did-you-mean refusal for a name verl's registry does not hold that reads as ours."""
    misspelt = validation.misspelt_estimator(name)
    return None if misspelt is None or registered_in_verl(name) else misspelt


def registered_in_verl(name: Any) -> bool:
    """Whether verl's advantage registry holds ``name`` (another plugin may own a near name)."""
    from verl.trainer.ppo import core_algos

    return isinstance(name, str) and name in core_algos.ADV_ESTIMATOR_REGISTRY

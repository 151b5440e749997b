"""`FamilySpec`: what vlmprep states about one model type, and the statuses a model type can have.

The table of specs, keyed by model type, is `vlmprep.models.registry.FAMILY_SPECS`; the statuses are explained there.
Plain data: importing this module imports no model code.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from packaging.version import Version

from .text_only_rules import TextOnlyFamily

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "ALIAS",
    "BLOCKED_UPSTREAM",
    "CANDIDATE",
    "DROP_IN",
    "NOT_PLACEHOLDER_BASED",
    "STATUSES",
    "FamilySpec",
    "alias",
    "blocked_upstream",
    "candidate",
    "drop_in",
    "installed_transformers",
    "not_placeholder_based",
]

DROP_IN = "drop-in"
ALIAS = "alias"
CANDIDATE = "candidate"
NOT_PLACEHOLDER_BASED = "not placeholder-based"
BLOCKED_UPSTREAM = "blocked upstream"
STATUSES = (DROP_IN, ALIAS, CANDIDATE, NOT_PLACEHOLDER_BASED, BLOCKED_UPSTREAM)


@cache
def installed_transformers() -> Version:
    """The installed transformers release (its package metadata: nothing of transformers is imported)."""
    return Version(importlib.metadata.version("transformers"))


@dataclass(frozen=True)
class FamilySpec:
    """What vlmprep states about one model type.

    Args:
        status (`str`): one of `STATUSES`.
        drop_in (`str`, *optional*):
            `"<module>.<class>"` of the drop-in in `vlmprep.models` (imported only by `drop_in_class`); only for a
            drop-in.
        text_only (`TextOnlyFamily`, *optional*):
            how `vlmprep.AutoModelForCausalLM` takes the text decoder out of a checkpoint; `None` when it does not.
        alias_of (`str`, *optional*): for an alias, the model type whose drop-in it loads.
        reason (`str`, *optional*): for a candidate, a type not placeholder-based or one blocked upstream, what
            stands in the way of a drop-in today (one line).
        tiny_config (`str`, *optional*):
            the builder in `vlmprep.testing.configs` of the tiny test config (`"tiny_gemma3_config"`), which every
            drop-in has (`vlmprep.testing.tiny_config(model_type)` calls it).
        since (`str`, *optional*):
            the transformers release that added the model type (`"5.25"`), where it is newer than the lowest supported
            one; `None` when every supported release has it. Under an older transformers the spec is not installed:
            it is absent from `FAMILY_SPECS` (no drop-in, no test case), listed in `NEWER_FAMILY_SPECS` instead.
        older (`FamilySpec`, *optional*):
            with `since`, for a model type that older releases have too but that vlmprep can adapt only from `since`
            on (transformers fixed it there): the spec those older releases see in `FAMILY_SPECS` (a type blocked
            upstream, with its reason).
    """

    status: str
    drop_in: str | None = None
    text_only: TextOnlyFamily | None = None
    alias_of: str | None = None
    reason: str | None = None
    tiny_config: str | None = None
    since: str | None = None
    older: FamilySpec | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"A FamilySpec's status is one of {STATUSES}, got {self.status!r}.")
        is_drop_in = self.status == DROP_IN
        if is_drop_in != (self.drop_in is not None) or is_drop_in != (self.tiny_config is not None):
            raise ValueError("A drop-in (and only a drop-in) names its class and the builder of its tiny config.")
        if self.text_only is not None and not isinstance(self.text_only, TextOnlyFamily):
            # A drop-in's layout is its class's layout base (`vlmprep.models.layouts.layout_of`), not a spec argument.
            raise TypeError(f"`text_only` is a `TextOnlyFamily`, got {self.text_only!r}.")
        if (self.status == ALIAS) != (self.alias_of is not None):
            raise ValueError("An alias (and only an alias) names the model type whose drop-in it loads.")
        if (self.status in (DROP_IN, ALIAS)) == (self.reason is not None):
            raise ValueError("A type without a drop-in of its own or of another type says what stands in the way.")
        if self.older is not None and (self.since is None or self.older.since is not None):
            raise ValueError(
                "Only a spec that starts at a release (`since`) states what older releases see (`older`)."
            )

    @property
    def installed(self) -> bool:
        """Whether the installed transformers has this model type (a release at or after `since`)."""
        # `base_version`: a 5.25 pre-release or dev build already has what 5.25 added
        return self.since is None or Version(installed_transformers().base_version) >= Version(self.since)

    @property
    def module(self) -> str | None:
        """The drop-in's module name inside `vlmprep.models` (`"gemma3"`), or `None`."""
        return None if self.drop_in is None else self.drop_in.rsplit(".", 1)[0]

    @property
    def class_name(self) -> str | None:
        """The drop-in's class name, the transformers class's (`"Gemma3ForConditionalGeneration"`), or `None`."""
        return None if self.drop_in is None else self.drop_in.rsplit(".", 1)[1]

    def drop_in_class(self) -> type[PreTrainedModel]:
        """The drop-in class of this model type, imported on first use (an alias's is its model type's:
        `vlmprep.models.registry.drop_in_class_of`)."""
        if self.drop_in is None:
            raise ValueError(f"This model type has no drop-in class ({self.status}): {self.reason}")
        return getattr(importlib.import_module(f"{__package__}.{self.module}"), self.class_name)


def drop_in(
    drop_in: str, text_only: TextOnlyFamily | None = None, since: str | None = None, older: FamilySpec | None = None
) -> FamilySpec:
    """A drop-in's spec: `"<module>.<class>"`, its text-only rule and the transformers release that added it (`since`),
    or from which vlmprep adapts it while older releases see the spec `older`; its tiny config is named after the
    module.

    The drop-in's layout is stated once, by its class (the layout class among its bases: `layouts.layout_of`).
    """
    if isinstance(text_only, str):  # the layout used to be the second argument: say where it went
        raise TypeError(
            f"drop_in({drop_in!r}, {text_only!r}): a drop-in's layout is stated by its class (a layout class among its "
            "bases), not in the registry; pass only the class and, optionally, its text-only rule."
        )
    # A drop-in's tiny test config is built by `tiny_<module>_config` of `vlmprep.testing.configs`.
    tiny_config = f"tiny_{drop_in.rsplit('.', 1)[0]}_config"
    return FamilySpec(DROP_IN, drop_in=drop_in, text_only=text_only, tiny_config=tiny_config, since=since, older=older)


def alias(model_type: str) -> FamilySpec:
    """The spec of a config type built as `model_type`'s class under its own name."""
    return FamilySpec(ALIAS, alias_of=model_type)


def candidate(reason: str, text_only: TextOnlyFamily | None = None) -> FamilySpec:
    """The spec of a placeholder-style type without a drop-in yet; `reason` says what it still needs."""
    return FamilySpec(CANDIDATE, reason=reason, text_only=text_only)


def not_placeholder_based(reason: str, since: str | None = None) -> FamilySpec:
    """The spec of a type whose images do not reach `generate` through placeholder tokens (added to transformers by
    the release `since`, where that is newer than the lowest supported one)."""
    return FamilySpec(NOT_PLACEHOLDER_BASED, reason=reason, since=since)


def blocked_upstream(reason: str) -> FamilySpec:
    """The spec of a type that transformers itself keeps from being a drop-in today."""
    return FamilySpec(BLOCKED_UPSTREAM, reason=reason)

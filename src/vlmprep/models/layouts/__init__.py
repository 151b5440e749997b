"""The named pixel/placeholder layouts that family files pick from.

A layout is how one family's pixel inputs split into *items* (an image, a tile, a crop, a video) and how many
placeholder tokens each item fills. A family with a layout of its own states it in its file; a layout that several
families share lives in a module here, as a class of family hooks listed before `VisionPrepMixin` (and,
where it has one, the `VisionFacts` that go with it). Family files import layouts, the registry and the mixin, never
each other.

A layout is its class: it states its `layout_name` and `layout_description`, and a drop-in's layout is the one among
its bases (`layout_of`). `all_layouts()` finds every layout; `utils/check_exports.py` checks that every drop-in has
one.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...generation.hooks import FamilyHooks

__all__ = ["all_layouts", "layout_of"]


def all_layouts() -> dict[str, type[FamilyHooks]]:
    """Every layout by its name: the classes of this package's modules that state a `layout_name`.

    Imports every layout module (importing this package imports none of them: a family imports only its own).

    Returns:
        `dict[str, type[FamilyHooks]]`: layout name -> layout class.

    Raises:
        `ValueError`: two layout classes state the same name.
    """
    found: dict[str, type[FamilyHooks]] = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        classes = [value for value in vars(module).values() if isinstance(value, type)]
        for layout in [cls for cls in classes if cls.__module__ == module.__name__ and "layout_name" in vars(cls)]:
            if found.setdefault(layout.layout_name, layout) is not layout:
                raise ValueError(
                    f"Two layouts are named {layout.layout_name!r}: {found[layout.layout_name]}, {layout}"
                )
    return found


def layout_of(cls: type) -> type[FamilyHooks] | None:
    """The layout of a drop-in class: the most specific layout class among its bases.

    Args:
        cls (`type`): a drop-in class (or any class).

    Returns:
        `type[FamilyHooks]` or `None`: the layout class (a value of `all_layouts()`), or `None` when the class has no
        layout among its bases.
    """
    return next((klass for klass in cls.__mro__ if "layout_name" in vars(klass)), None)

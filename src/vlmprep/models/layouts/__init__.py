"""The named pixel/placeholder layouts that family files pick from.

A layout is how one family's pixel inputs split into *items* (an image, a tile, a crop, a video) and how many
placeholder tokens each item fills. A family with a layout of its own states it in its file; a layout that several
families share lives in a module here, as a class of family hooks listed before `VisionPrepMixin` (and,
where it has one, the `VisionFacts` that go with it). Family files import layouts, the registry and the mixin, never
each other.

A layout is data: a `Layout` (name and description) that a drop-in states as its `layout`, directly or through the
class of layout hooks it lists first among its bases (a layout that needs code). A layout of counts the family states
itself (`stated_counts`) has no class: the family states `layout = FIXED_IMAGE`. `all_layouts()` finds every layout;
`utils/check_exports.py` checks that every drop-in has one.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

__all__ = ["Layout", "all_layouts", "layout_of"]


@dataclass(frozen=True)
class Layout:
    """How one family's pixel inputs split into items and how many placeholders each item fills, named.

    Args:
        name (`str`): the layout's name (docs/families.md's *Layout* column).
        description (`str`): items and placeholders, in a line.
    """

    name: str
    description: str


def _layouts_in(module) -> list[Layout]:
    found = [value for value in vars(module).values() if isinstance(value, Layout)]
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__:
            own = _stated_layout(value)
            if own is not None:
                found.append(own)
    return found


def _stated_layout(cls: type) -> Layout | None:
    # A class's own layout (not one it inherits)
    own = vars(cls).get("layout")
    return own if isinstance(own, Layout) else None


def all_layouts() -> dict[str, Layout]:
    """Every layout by its name: the `Layout`s this package's modules state, as constants or as a class's `layout`.

    Imports every layout module (importing this package imports none of them: a family imports only its own).

    Returns:
        `dict[str, Layout]`: layout name -> layout.

    Raises:
        `ValueError`: two different layouts state the same name.
    """
    found: dict[str, Layout] = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for layout in _layouts_in(module):
            if found.setdefault(layout.name, layout) != layout:
                raise ValueError(f"Two layouts are named {layout.name!r}: {found[layout.name]}, {layout}")
    return found


def layout_of(cls: type) -> Layout | None:
    """The layout of a drop-in class: its `layout`, stated by the class or by the layout hooks among its bases.

    Args:
        cls (`type`): a drop-in class (or any class).

    Returns:
        `Layout` or `None`: the layout (a value of `all_layouts()`), or `None` when the class states none.
    """
    return next((layout for klass in cls.__mro__ if (layout := _stated_layout(klass)) is not None), None)

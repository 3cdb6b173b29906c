"""Name -> object registries (rules, methods, models, datasets), DomainBed style.

A typo in a name gives one ValueError that lists the known names, and the closest of them (`did_you_mean`, the
standard library's difflib), so a CLI can print it as is.
"""
from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")


def did_you_mean(value: object, names: Iterable[str]) -> str:
    """"; did you mean 'fedgp'?" for the known name closest to a misspelt `value` (difflib's ratio of at least
    0.6), or "" when none is close or `value` is not a string."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [str(n) for n in names], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class Registry(Generic[T]):
    """A small ordered mapping from names to registered objects."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(self._items)
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}{did_you_mean(name, self._items)}") from None

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

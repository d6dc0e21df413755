"""Help that names each value as a man page does (``--set KEY=VALUE``, ``query TEXT``), not by
its Python type.

Typer 0.29 prints a parameter's type where Click printed its metavar: ``<bool>`` after every
flag, ``<list[str]>`` after a repeatable option, ``{text}`` for a required argument. The command
classes here hand Typer's parameters to help as :class:`_Option` and :class:`_Argument`, which
differ only in how they are named: an option by its ``metavar`` (a flag by nothing), an argument
by its ``metavar`` or upper-cased name, ``[NAME]`` when optional. Parsing is unchanged.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return self.metavar or self.name.upper()


class _Argument(TyperArgument):
    @property
    def display_name_raw(self) -> str:
        return self.metavar or self.name.upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name column already shows the metavar

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return [name if self.required else f"[{name}]"]


def _named(params: list[Any]) -> list[Any]:
    """``params`` with Typer's option and argument classes swapped for the ones above (in place:
    the subclasses add no state, so a parameter keeps every value it was built with)."""
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = _Option
        elif type(param) is TyperArgument:
            param.__class__ = _Argument
    return params


class Command(TyperCommand):
    """A command whose help names values by metavar (see the module)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _named(super().get_params(ctx))


class Group(TyperGroup):
    """A group of commands whose help names values by metavar (see the module)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _named(super().get_params(ctx))

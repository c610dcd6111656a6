"""Which options the user typed, as opposed to values argparse filled in from defaults.

A command that refuses flags its mode ignores must not refuse a default: after
``record_given_options(parser)``, every option added to ``parser`` that appears on the
command line is listed by ``given_options(args)``, in command-line order.
"""

from __future__ import annotations

import argparse

_ATTRIBUTE = "given_options"
# argparse's action kinds (``action=`` values; None is the default, "store").
_KINDS = (None, "store", "store_const", "store_true", "store_false", "append", "append_const", "extend", "count")


def _recording(action_class: type) -> type:
    class Recording(action_class):
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            if option_string is not None:
                # A fresh dict each time: a default shared between parses would accumulate.
                given = {**getattr(namespace, _ATTRIBUTE, {}), self.dest: option_string}
                setattr(namespace, _ATTRIBUTE, given)

    Recording.__name__ = f"Recording{action_class.__name__}"
    return Recording


def record_given_options(parser: argparse.ArgumentParser) -> None:
    """Options added to ``parser`` (and its groups) from now on record themselves when given."""
    for kind in _KINDS:
        parser.register("action", kind, _recording(parser._registry_get("action", kind)))


def given_options(args: argparse.Namespace) -> dict[str, str]:
    """``dest -> option as typed`` (abbreviations expanded) for every recorded option on the command line."""
    return dict(getattr(args, _ATTRIBUTE, {}))

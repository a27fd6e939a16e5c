"""The TOML parser this Python has: tomllib (3.11+), else tomli where installed, else none."""

from __future__ import annotations


def toml_loads():
    """(loads, decode_error) of tomllib or tomli; (None, None) when neither is there (Python 3.10
    without tomli): callers say what they could not read."""
    try:
        import tomllib  # Python 3.11+

        return tomllib.loads, tomllib.TOMLDecodeError
    except ModuleNotFoundError:
        try:
            import tomli

            return tomli.loads, tomli.TOMLDecodeError
        except ModuleNotFoundError:
            return None, None

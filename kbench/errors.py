"""The one exception type for a user's mistake: the CLI prints it as one line and exits 2."""


class UserError(Exception):
    """Bad input from the user (unknown suite, bad size, unwritable path...)."""

    exit_code = 2

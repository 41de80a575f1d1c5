"""The one error type users see: bad input, with file, line and key in its message."""


class InputError(ValueError):
    """Bad input (config, trace or plan): the message names the file, line, key or limit."""

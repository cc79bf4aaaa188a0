"""The one kind of error a user sees: a `ValueError` whose message names the input, the field and the
allowed values. The CLI prints it as one line and exits non-zero; everything else is a bug."""


class UserError(ValueError):
    """Bad input from a user: a file, a flag, a field. The message is the whole story, one line."""

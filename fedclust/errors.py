"""One exception type for every user-facing failure: a bad config, missing data, an impossible request.

The CLI catches :class:`FedclustError` and prints its message as one sentence (no traceback), so the
message must name the field, the value and what would be valid.
"""


class FedclustError(Exception):
    """A failure the user can fix; its message is shown as-is."""


class ConfigError(FedclustError, ValueError):
    """A config field has a value that cannot work."""

    def __init__(self, field: str, value: object, valid: str):
        self.field, self.value, self.valid = field, value, valid
        super().__init__(f"{field} = {value!r} is not valid: {valid}.")


class MethodArgError(ConfigError):
    """A method's init argument that cannot work, named as a config writes it: method.init_args.NAME."""

    def __init__(self, name: str, value: object, valid: str):
        super().__init__(f"method.init_args.{name}", value, valid)


class NotFittedError(FedclustError):
    """A method asked to assign clusters before it has any (no client has taken part yet)."""


class DataFileError(FedclustError, ValueError):
    """A data file is there but cannot be what it claims (truncated, damaged, mismatched)."""


class DataNotFoundError(FedclustError, FileNotFoundError):
    """A data set is not where it was looked for."""

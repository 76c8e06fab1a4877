"""The one exception users see: bad input, reported as a single line (exit status 2 in the CLI)."""


class FasopError(Exception):
    """A user error. The message is one line naming the file, the key and the offending value."""


class SpecError(FasopError):
    """A spec file that cannot be used: ``SpecError(path, key, message)``."""

    def __init__(self, path: str, key: str, message: str):
        where = f"{path}: {key}" if key else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.key = key
        self.message = message

    def __reduce__(self):  # pickled as its three arguments: it crosses process pools and Ray intact
        return (type(self), (self.path, self.key, self.message))


class NoPlan(FasopError):
    """The inputs are valid but this inventory has no valid plan (no (tp, dp, pp, mbs) divides its
    GPUs, the batch and the layers). A sweep records it as the composition's `no_plan` reason;
    every other error stops the sweep."""

"""Error types. Every error a user can cause is a MemfxError: the CLI prints
its message on one line and exits with status 2."""


class MemfxError(Exception):
    """Bad input or an unusable environment; shown as one line, exit 2."""


class StoreError(MemfxError):
    """The results database cannot be used (unreadable, foreign, newer schema)."""


class ParamError(MemfxError):
    """An unknown parameter, a value of the wrong type or unit, or one out of range."""


class StoreUnavailable(StoreError):
    """The connection to a shared (PostgreSQL) store was lost mid-way."""


class MeasurementFailed(MemfxError):
    """A run's worker failed or was killed (a signal, an internal error): the
    run is kept, marked failed, so this is not bad input (exit 4, not 2)."""

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

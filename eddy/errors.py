"""The project's error base. Every typed error in Eddy subclasses `EddyError`."""


class EddyError(Exception):
    """Base of all errors raised by Eddy itself."""

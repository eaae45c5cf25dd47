"""The state API's errors, under Ray's names (ray.util.state.exception)."""


class RayStateApiException(Exception):
    """A state call could not answer: its cluster or a source did not, its output would be
    incomplete with raise_on_missing_output=True, or it was asked something it cannot answer."""


class DataSourceUnavailable(RayStateApiException):
    """A source of the state (the GCS, a raylet) did not answer in time."""


class ServerUnavailable(RayStateApiException):
    """No cluster answers at the address."""


class UnsupportedFilterError(RayStateApiException, ValueError):
    """A filter names a column the resource cannot be filtered by (phalanx's: a ValueError too, as the
    check is Ray's server's ValueError, which Ray's client passes on as a RayStateApiException)."""

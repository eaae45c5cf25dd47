"""What a list call does with the rows of a resource, as Ray's state API server does: check and apply
the filters, order the rows, keep `limit` of them, keep the columns `detail` asks for, and make each a
state object (common.py). Pure functions of their arguments."""
from phalanx.util.state.common import RAY_MAX_LIMIT_FROM_API_SERVER, ListApiResponse, filter_fields
from phalanx.util.state.exception import RayStateApiException, UnsupportedFilterError

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _as_bool(text):
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"filter value {text!r} is not a boolean: give one of {_TRUE + _FALSE}")


def _equal(have, want):
    """Ray's comparison of a column's value with a filter's: strings without regard to case, and a string
    filter value read as the column's type (bool, int, float) when the column is one."""
    if isinstance(want, str):
        if isinstance(have, str):
            return have.lower() == want.lower()
        if isinstance(have, bool):
            return have == _as_bool(want)
        if isinstance(have, (int, float)):
            try:
                return have == type(have)(want)
            except ValueError:
                return False
        if have is None:
            return want.lower() in ("none", "null", "")
    return have == want


def check_columns(filters, schema):
    """The filters with their keys in lower case (as Ray's); UnsupportedFilterError names the filterable
    columns when a key is not one."""
    allowed = schema.filterable_columns()
    out = []
    for key, predicate, value in filters:
        column = str(key).lower()
        if column not in allowed:
            raise UnsupportedFilterError(f"The given filter column {key} is not supported. Supported filter "
                                         f"columns: {sorted(allowed)}")
        out.append((column, predicate, value))
    return out


def matches(row, filters):
    return all(_equal(row.get(column), value) == (predicate == "=") for column, predicate, value in filters)


def check_limit(limit):
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    if limit > RAY_MAX_LIMIT_FROM_API_SERVER:
        raise RayStateApiException(f"Given limit {limit} exceeds the supported limit "
                                   f"{RAY_MAX_LIMIT_FROM_API_SERVER}. Use a lower limit.")


def make_state(schema, row, detail):
    state = schema(**filter_fields(row, schema, detail))
    state._detail = detail  # (what keys() lists; not a column)
    return state


def select(rows, schema, options, order, total=None, partial_failure=""):
    """The ListApiResponse of `rows` (dicts with every column) for ListApiOptions `options`, ordered by
    `order` (a key function); `total`: entries at the sources, when more than were read."""
    check_limit(options.limit)
    filters = check_columns(options.filters, schema)
    kept = sorted((r for r in rows if matches(r, filters)), key=order)
    result = [make_state(schema, r, options.detail) for r in kept[:options.limit]]
    return ListApiResponse(total=max(total or 0, len(rows)), num_after_truncation=len(rows), num_filtered=len(kept),
                           result=result, partial_failure_warning=partial_failure)

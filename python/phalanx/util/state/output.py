"""How `phalanx list|get|summary` print the state, as Ray's CLI prints it: a table (the default; a
"Stats:" part and a "Table:" part, columns in the schema's order, upper case), YAML or JSON for lists;
YAML for get; a stats part and a table per summary. Pure functions of their arguments."""
import copy
import datetime
import json

import yaml

FORMATS = ("default", "json", "yaml", "table")


def _cell(value):
    if isinstance(value, (dict, list)):
        return yaml.dump(value, indent=2, sort_keys=False).rstrip("\n") if value else str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def plain_table(rows, headers):
    """Rows (lists of values) under `headers`, each row numbered, columns two spaces apart; a value of
    several lines takes several lines."""
    cells = [[str(i)] + [_cell(v) for v in row] for i, row in enumerate(rows)]
    head = [""] + list(headers)
    widths = [max([len(head[c])] + [len(line) for r in cells for line in r[c].split("\n")])
              for c in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    for r in cells:
        split = [c.split("\n") for c in r]
        for k in range(max(len(s) for s in split)):
            lines.append("  ".join((s[k] if k < len(s) else "").ljust(w) for s, w in zip(split, widths)).rstrip())
    return "\n".join(lines)


def _stamp():
    return datetime.datetime.now()


def _dicts(states, schema, detail):
    columns = schema.list_columns(detail=detail)
    return [schema.humanify({c: copy.deepcopy(s.asdict()[c]) for c in columns}) for s in states], columns


def table_output(states, schema, detail):
    data, columns = _dicts(states, schema, detail)
    table = plain_table([[d[c] for c in columns] for d in data], [c.upper() for c in columns])
    return (f"\n{'=' * 8} List: {_stamp()} {'=' * 8}\nStats:\n{'-' * 30}\nTotal: {len(data)}\n\n"
            f"Table:\n{'-' * 30}\n{table}\n")


def list_output(states, schema, fmt="default", detail=False):
    """`phalanx list`'s output of `states` (a list's result) in `fmt` (FORMATS)."""
    if fmt not in FORMATS:
        raise ValueError(f"Unexpected format: {fmt}. Supported formatting: {list(FORMATS)}")
    if not states:
        return "No resource in the cluster"
    if fmt in ("default", "table"):
        return table_output(states, schema, detail)
    data, _ = _dicts(states, schema, detail)
    if fmt == "yaml":
        return yaml.dump(data, indent=4, explicit_start=True, sort_keys=False, explicit_end=True)
    return json.dumps(data)


def get_output(found, id, schema):
    """`phalanx get`'s output: the state (or states) found, as YAML."""
    if not found:
        return f"Resource with id={id} not found in the cluster."
    states = found if isinstance(found, list) else [found]
    return list_output(states, schema, "yaml", detail=True)


def summary_output(summary, resource):
    """`phalanx summary tasks|actors|objects`' output of a summarize_* result."""
    if not summary:
        return "No resource in the cluster"
    cluster = dict(summary["cluster"])
    groups, by = cluster.pop("summary"), cluster.pop("summary_by")
    stats = yaml.dump(cluster, indent=2)
    header = f"{'=' * 8} {resource.capitalize()} Summary: {_stamp()} {'=' * 8}"
    if resource == "objects":
        tables = []
        for site, s in groups.items():
            keys = sorted(s)
            tables.append(f"{site}\n" + plain_table([[s[k] for k in keys]], [k.upper() for k in keys]))
        body = "\n\n".join(tables) or "(none)"
        return f"\n{header}\nStats:\n{'-' * 36}\n{stats}\n\nTable (group by {by})\n{'-' * 36}\n{body}\n"
    keys = sorted(next(iter(groups.values()))) if groups else []
    table = plain_table([[s[k] for k in keys] for s in groups.values()], [k.upper() for k in keys])
    return f"\n{header}\nStats:\n{'-' * 36}\n{stats}\n\nTable (group by {by}):\n{'-' * 36}\n{table}\n"

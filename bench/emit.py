#!/usr/bin/env python3
"""emit.py APPROACH RATE RUN KEY=VALUE... -> one JSON object on stdout.

The same record shape bench/peers.sh writes (it uses this too), so the
report can put ferry's runs and the peers' runs in one table. A value that parses as
JSON is stored as JSON, "NA" or "" as null, anything else as a string.
"""
import json
import sys


def main():
    a = sys.argv[1:]
    if len(a) < 3:
        sys.exit(__doc__)
    rec = {"approach": a[0], "rate": a[1], "run": int(a[2])}
    for kv in a[3:]:
        k, _, v = kv.partition("=")
        if v in ("NA", ""):
            rec[k] = None
            continue
        try:
            rec[k] = json.loads(v)
        except ValueError:
            rec[k] = v
    print(json.dumps(rec, ensure_ascii=False))


if __name__ == "__main__":
    main()

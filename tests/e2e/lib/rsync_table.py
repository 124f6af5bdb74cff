#!/usr/bin/env python3
"""rsync_table.py FERRY MANPAGE: every row of ferry(1)'s RSYNC OPTIONS table
holds: an option the table says is refused exits 1 with one line naming
it, any other is taken (ferry sync then fails only to reach its dummy
URL). At least 100 rows. Exit 0 or 1, mismatches on stdout."""
import re
import subprocess
import sys
import tempfile

ferry, man = sys.argv[1], sys.argv[2]
txt = open(man).read()
sec = txt[txt.index(".SH RSYNC OPTIONS"):]
sec = sec[:sec.index(".PD\n")]
bad = 0; n = 0
for m in re.finditer(r"\.TP 28\n\.B (.*)\n(.*)\n", sec):
    opt = m.group(1).replace("\\-", "-").replace("\\\\", "\\")
    what = m.group(2).replace("\\-", "-")
    # the first spelling, with a dummy argument where it takes one
    first = opt.split(",")[0].split(" ")[0]
    args = []
    if "=" in first:
        name, val = first.split("=", 1)
        args = [name + "=" + ("1" if val in ("NUM", "SIZE", "SECONDS", "MINS", "RATE") else "x")]
    else:
        args = [first]
    # in a directory of its own: --log-file=x makes ./x
    with tempfile.TemporaryDirectory() as cwd:
        r = subprocess.run([ferry, "sync"] + args + ["http://127.0.0.1:1/v1/x", "/nonexistent/dest"],
                           capture_output=True, text=True, timeout=20, cwd=cwd)
    refused = r.returncode == 1 and ("unknown option" in r.stderr or "not supported" in r.stderr or "requires an argument" in r.stderr)
    n += 1
    if what.startswith("refused") != refused:
        bad += 1
        print("MISMATCH", args, "table:", what, "exit", r.returncode, r.stderr.strip()[:100])
    elif refused and first.split("=")[0] not in r.stderr:
        bad += 1
        print("NOT NAMED", args, r.stderr.strip()[:100])
print("checked", n, "mismatches", bad)
sys.exit(1 if bad or n < 100 else 0)

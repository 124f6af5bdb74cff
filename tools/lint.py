#!/usr/bin/env python3
"""tools/lint.py [ROOT] — the include rules of tools/rooms.txt, checked.

Every #include of every C file under ROOT (default: the checkout this
script is in) must be allowed by the table: a header of the file's own
room, a "face" header of a room its row lists, a library its row lists,
or a standard header. And every header's name says its tier: a face
never ends in _priv.h, a header its room keeps to itself always does. Prints one line per violation, naming the file, the
line, the include and the rule, and exits 1 if there was any; else prints
one "ok" line and exits 0. tools/lint.sh runs it with the other checks.
"""
import os
import re
import sys

# Library name -> how its headers are spelled in #include <...>.
LIBS = {
    "sqlite": re.compile(r"^sqlite3(ext)?\.h$"),
    "curl": re.compile(r"^curl/"),
    "jansson": re.compile(r"^jansson(_config)?\.h$"),
    "uv": re.compile(r"^uv(/|\.h$)"),
    "http_parser": re.compile(r"^http_parser\.h$"),
    "fuse": re.compile(r"^fuse(3/|_lowlevel\.h$|\.h$|_opt\.h$|_common\.h$)"),
    "openssl": re.compile(r"^openssl/"),
    "zstd": re.compile(r"^zstd(_errors)?\.h$|^zdict\.h$"),
    "lz4": re.compile(r"^lz4(hc|frame)?\.h$"),
    "xxhash": re.compile(r"^xxhash\.h$"),
    "cmocka": re.compile(r"^cmocka\.h$"),
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def load_table(path):
    rooms, faces = {}, {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            kind, rest = line.split(None, 1)
            if kind == "room":
                left, _, libs = rest.partition("|")
                words = left.split()
                room, deps = words[0], [w for w in words[1:] if w != "-"]
                rooms[room] = (set(deps), set(libs.split()))
            elif kind == "face":
                words = rest.split()
                faces[words[0]] = {w for w in words[1:] if w != "-"}
            else:
                sys.exit("%s:%d: unknown line kind %r" % (path, n, kind))
    return rooms, faces


def room_of(rel, rooms):
    """The room of the file rel (a path under ROOT): its own folder, which
    must be listed; a new folder is a new room and needs its own row."""
    d = os.path.dirname(rel)
    return d if d in rooms else None


def check_tier(rel, room, rooms, faces):
    """A header's name tells its tier: a room's face (listed on its "face"
    line) never ends in _priv.h, and every other header of a room does,
    so a reader knows from the name alone whether other rooms may include
    it. Rooms open to everything ("*": the tests) are left alone."""
    if not rel.endswith(".h") or "*" in rooms[room][0]:
        return []
    name = os.path.basename(rel)
    face = name in faces.get(room, set())
    if face and name.endswith("_priv.h"):
        return ["%s: a face of room %s, so its name may not end in _priv.h"
                % (rel, room)]
    if not face and not name.endswith("_priv.h"):
        return ["%s: not a face of room %s (rooms.txt), so its name must "
                "end in _priv.h" % (rel, room)]
    return []


def check_file(root, rel, room, rooms, faces):
    deps, libs = rooms[room]
    bad = []
    with open(os.path.join(root, rel), encoding="utf-8",
              errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            quote, inc = m.group(1), m.group(2)
            where = "%s:%d: #include %s%s%s" % (
                rel, n, quote, inc, '"' if quote == '"' else ">")
            if quote == "<":
                lib = next((k for k, p in LIBS.items() if p.search(inc)),
                           None)
                if lib and lib not in libs and "*" not in libs:
                    bad.append("%s: room %s may not use %s (rooms.txt "
                               "allows: %s)" % (where, room, lib,
                                                " ".join(sorted(libs)) or
                                                "none"))
                continue
            target = os.path.dirname(inc)
            name = os.path.basename(inc)
            if not target and os.path.exists(
                    os.path.join(root, os.path.dirname(rel), name)):
                # "x.h" with no folder: the one next to the file itself.
                target = room
            if target not in rooms:
                bad.append("%s: %s is not a room (includes name a "
                           "header by its path from the top)" %
                           (where, target or "(top)"))
            elif target == room or "*" in deps:
                pass
            elif target not in deps:
                bad.append("%s: room %s may not include room %s "
                           "(rooms.txt allows: %s)" %
                           (where, room, target,
                            " ".join(sorted(deps)) or "none"))
            elif name not in faces.get(target, set()):
                bad.append("%s: %s is internal to room %s (its face: %s)" %
                           (where, name, target,
                            " ".join(sorted(faces.get(target, ()))) or
                            "none"))
    return bad


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(here, ".."))
    rooms, faces = load_table(os.path.join(root, "tools", "rooms.txt"))
    bad, seen = [], 0
    for top in ("catalog", "replicator", "hydrator", "tools", "tests"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for fn in sorted(files):
                if not fn.endswith((".c", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(d, fn), root)
                room = room_of(rel, rooms)
                if room is None:
                    bad.append("%s: in no room of tools/rooms.txt" % rel)
                    continue
                seen += 1
                bad += check_tier(rel, room, rooms, faces)
                bad += check_file(root, rel, room, rooms, faces)
    for b in bad:
        print("lint: " + b, file=sys.stderr)
    if bad:
        return 1
    print("lint: includes of %d files follow tools/rooms.txt" % seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
